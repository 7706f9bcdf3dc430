"""Re-record methods of golden_demo.json after an intended change of their numbers.

    python tests/integration/golden/record.py bbt-fed fedbpt feddls --why "issue 44: ..."

Runs each method in ``tests/integration/test_golden.py``'s setting with the test's own
function (``golden_rounds``: the server's round loop in this process) and
replaces that method's rounds in the file, with the commit, date and reason of the change in
the method's ``rerecorded`` field. Methods not named keep what they recorded. Run it from a
clean checkout of the commit that makes the change: the record names that commit.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "integration" / "golden" / "golden_demo.json"
FIELDS = ("round", "global_accuracy", "global_loss", "client_accuracy", "client_post_accuracy", "num_clients",
          "bytes_up", "bytes_down", "bytes_up_per_client", "bytes_down_per_client", "eval_bytes_down",
          "model_queries", "server_queries", "train_loss")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("methods", nargs="+")
    p.add_argument("--why", required=True, help="the intended change that moved the numbers")
    args = p.parse_args()
    sys.path.insert(0, str(REPO))
    from tests.integration.test_golden import golden_rounds

    doc = json.loads(GOLDEN.read_text())
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=True).stdout.strip()
    for method in args.methods:
        entry = doc["methods"][method]
        with tempfile.TemporaryDirectory() as out:
            rounds = golden_rounds(method, Path(out))
        entry["rounds"] = [{k: r[k] for k in FIELDS} for r in rounds]
        entry["rerecorded"] = {"commit": commit, "dirty": bool(dirty), "date": datetime.date.today().isoformat(),
                               "why": args.why}
        print(f"{method}: final global accuracy {rounds[-1]['global_accuracy']}")
    GOLDEN.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
