"""Shared fixtures: the offline backbone is loaded once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never touch a hub
os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("FEDTEXT_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture(scope="session")
def backbone():
    from fedtext.backbone import get_backbone

    return get_backbone("all-MiniLM-L6-v2", "similarity", "demo", 64)


@pytest.fixture(scope="session")
def demo():
    from fedtext.data import make_demo

    return make_demo()
