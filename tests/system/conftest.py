"""One deployment (docs/deployment.md's recipe, tests/system/recipe.py) for the whole
tests/system package: test_deploy.py and test_adversarial.py share it, so it starts once."""

from __future__ import annotations

import pytest

from tests.system import recipe


@pytest.fixture(scope="package")
def deployment(tmp_path_factory):
    """The recipe as shipped: certificates, SuperLink on loopback, nginx on PUBLIC, 2 registered
    SuperNodes (online) and 1 unregistered, all through nginx."""
    why = recipe.missing_tools()
    if why:
        pytest.skip(why)
    with recipe.deployment(tmp_path_factory.mktemp("deploy")) as d:
        yield d
