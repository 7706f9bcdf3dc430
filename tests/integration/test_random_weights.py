"""``weights=random`` draws the same weights in every process of a run: a fresh interpreter
builds tiny-bert bit for bit as this one does (the server and each client build their own)."""

from __future__ import annotations

import hashlib
import subprocess
import sys

from ..conftest import REPO, _env

DIGEST = """
import hashlib, sys
from fedtext.backbone import Backbone
from fedtext.common.tasks import TASKS
b = Backbone("tiny-bert", "mlm" if len(sys.argv) > 1 else "similarity", TASKS["demo"], 32, weights="random")
h = hashlib.sha256()
for name, p in b.named_parameters():
    h.update(name.encode() + p.detach().numpy().tobytes())
print(h.hexdigest())
"""


def digest(head: str) -> str:
    from fedtext.backbone import Backbone
    from fedtext.common.tasks import TASKS

    b = Backbone("tiny-bert", head, TASKS["demo"], 32, weights="random")
    h = hashlib.sha256()
    for name, p in b.named_parameters():
        h.update(name.encode() + p.detach().numpy().tobytes())
    return h.hexdigest()


def test_a_fresh_interpreter_draws_the_same_random_weights():
    for head, args in (("similarity", []), ("mlm", ["mlm"])):
        proc = subprocess.run([sys.executable, "-c", DIGEST, *args], cwd=REPO, env=_env(), capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert proc.stdout.strip().splitlines()[-1] == digest(head), head
