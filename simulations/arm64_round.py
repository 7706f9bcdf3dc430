"""One round with a SuperNode on emulated arm64: ``python -m simulations.arm64_round ROOT``.

ROOT is a 64-bit Debian arm64 root that ``deploy/edge/arm64_root.sh ROOT`` built (Debian's
debootstrap and qemu-user-static; fedtext's SuperNode side from PyPI's aarch64 wheels). This
starts a SuperLink on this machine, one SuperNode inside ROOT (``chroot``: every binary there is
aarch64, run by qemu-user through binfmt_misc) behind fedtext's node service, exactly as a
board runs it (``python -m fedtext.node.service -- flower-supernode ...``), and submits a run
of this checkout with ``flwr run``; the record goes to ``--output-dir`` (default
simulations/results/edge/arm64) and its provenance names the node's platform
(``node_platforms``: ``{"0": "aarch64"}``). Emulated time is no device time: the seconds in
the record are qemu's on this machine's cores, not a board's.

Needs root (chroot, mounts). Everything started here is stopped by PID on exit.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from simulations.deployment import (
    REPO,
    Processes,
    cli,
    flwr_run_config,
    free_port,
    start_superlink,
)

VENV = "/opt/fedtext/venv"
# one round of bbt-fed, its local work cut to what emulation does in minutes (qemu-user runs the
# aarch64 torch kernels ~100x slower than the host: bbt-fed's defaults took 20 min of one core)
RUN_CONFIG = {"method": "bbt-fed", "num-server-rounds": 1, "eval-size": 40, "client-test-size": 20,
              "shots-per-class": 4, "bbt-fed.local-steps": 2, "bbt-fed.popsize": 6, "run-name": "arm64-emulated"}


def mounted(path: Path) -> bool:
    return subprocess.run(["mountpoint", "-q", str(path)], check=False).returncode == 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", help="the arm64 root deploy/edge/arm64_root.sh built")
    ap.add_argument("--output-dir", default=str(REPO / "simulations/results/edge/arm64"))
    ap.add_argument("--timeout-s", type=float, default=3600.0)
    args = ap.parse_args(argv)
    root = Path(args.root).resolve()
    if os.getuid() != 0:
        print("fedtext: needs root (chroot into the arm64 root)", file=sys.stderr)
        return 2
    if not (root / VENV.lstrip("/") / "bin/flower-supernode").exists():
        print(f"fedtext: {root} has no {VENV}: build it with deploy/edge/arm64_root.sh {root}", file=sys.stderr)
        return 2
    out = Path(args.output_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    logs = Path(tempfile.mkdtemp(prefix="fedtext-arm64-logs-"))
    home = Path(tempfile.mkdtemp(prefix="fedtext-flwr-home-"))
    port = free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = "127.0.0.1:{port}"\ninsecure = true\n')
    env = {**os.environ, "FLWR_HOME": str(home), "HF_HUB_OFFLINE": "1", "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    procs = Processes(env, logs)
    mounts = []
    before = set(out.glob("*/config.json"))
    try:
        for name, kind in (("proc", ["-t", "proc", "proc"]), ("dev", ["--bind", "/dev"])):
            target = root / name
            if not mounted(target):
                subprocess.run(["mount", *kind, str(target)], check=True)
                mounts.append(target)
        start_superlink(procs, port)
        # inside the root: its own environment, its own Python (aarch64, emulated)
        board_env = ["/usr/bin/env", "-i", f"PATH={VENV}/bin:/usr/bin:/bin", "HOME=/root", "HF_HUB_OFFLINE=1",
                     "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1", "PYTHONUNBUFFERED=1"]
        procs.start("supernode-arm64", ["chroot", str(root), *board_env, f"{VENV}/bin/python", "-m",
                                        "fedtext.node.service", "--threads", "2", "--", f"{VENV}/bin/flower-supernode",
                                        "--insecure", "--superlink", f"127.0.0.1:{port}", "--port", str(free_port()),
                                        "--node-config", "partition-id=0 num-partitions=1"])
        t0 = time.time()
        run = procs.start("flwr-run", [cli("flwr"), "run", str(REPO), "local", "--stream", "--run-config",
                                       flwr_run_config({**RUN_CONFIG, "output-dir": str(out)})])
        run.wait(timeout=args.timeout_s)
        print(f"fedtext: flwr run ended after {time.time() - t0:.0f} s", file=sys.stderr)
    finally:
        procs.stop_all()
        for target in reversed(mounts):
            subprocess.run(["umount", "-l", str(target)], check=False)
        kept = out.parent / "arm64-logs"
        shutil.rmtree(kept, ignore_errors=True)
        shutil.copytree(logs, kept)
        shutil.rmtree(logs, ignore_errors=True)
        shutil.rmtree(home, ignore_errors=True)
    new = sorted(set(out.glob("*/config.json")) - before)
    if not new:
        print(f"fedtext: no record written (logs: {kept})", file=sys.stderr)
        return 1
    meta = json.loads(new[-1].read_text())
    summary = json.loads((new[-1].parent / "summary.json").read_text())
    print(f"fedtext: run {new[-1].parent.name} {summary.get('status')}; node platforms "
          f"{meta['provenance'].get('node_platforms')}")
    with contextlib.suppress(Exception):
        return 0 if summary.get("status") == "finished" and "aarch64" in meta["provenance"]["node_platforms"].values() else 1
    return 1


if __name__ == "__main__":
    sys.exit(main())


def render() -> str:
    """docs/deployment.md's lines on the committed emulated round (``tools/generated.py``)."""
    out = REPO / "simulations/results/edge/arm64"
    runs = sorted(p.parent for p in out.glob("*/summary.json"))
    if not runs:
        return "(no record yet: python -m simulations.arm64_round ROOT)\n"
    run = runs[-1]
    meta = json.loads((run / "config.json").read_text())
    rounds = [json.loads(line) for line in (run / "rounds.jsonl").read_text().splitlines()]
    summary = json.loads((run / "summary.json").read_text())
    r1 = rounds[-1]
    prov = meta["provenance"]
    return (f"Record `{run.relative_to(REPO)}`: status {summary.get('status')}, node platforms "
            f"`{json.dumps(prov.get('node_platforms'))}` (the SuperLink and ServerApp on "
            f"`{meta['machine']['platform']}`), round {r1['round']}: accuracy {rounds[0]['global_accuracy']} -> "
            f"{r1['global_accuracy']}, {r1['bytes_up']} bytes up, {r1['model_queries']} model queries, the "
            f"emulated client's fit {r1['client_fit_s']} s and round {r1['round_time_s']} s (qemu on x86_64: "
            "not a board's seconds).\n")

