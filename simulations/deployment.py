"""Run one fedtext run through Flower's deployment engine on this machine, without Ray.

    python -m simulations.deployment --num-supernodes 10 \
        --run-config "method=fedbpt dataset=../shared/data/sst2 device=cuda" --output-dir runs
    python -m simulations.deployment --num-supernodes 10 --from-record <run folder> \
        --run-config "device=cuda run-name=on-gpu" --output-dir runs      # replay a recorded run
    flwr build && python -m simulations.deployment --app fedtext.fedtext.0-1-0.<hash>.fab  # a built FAB

One ``flower-superlink`` and N ``flower-supernode`` processes on loopback (insecure: one
machine), then ``flwr run <app> local --stream`` (``local``: the SuperLink connection written
in the launcher's own Flower home, ``<home>/config.toml``): the processes and messages of an edge
deployment (docs/deployment.md), each SuperNode holding partition i of N through its node
config, each behind fedtext's node service (``python -m fedtext.node.service``: one long-lived
process per SuperNode holding its backbone and data; ``--no-node-service`` for Flower's
plain SuperNode, where each message's ClientApp process loads everything anew) and with its
share of the cores (torch threads = cores / SuperNodes), as on separate boards. Use it where Ray is not installed
(a GPU machine with a framework image, say) or to check a run-config the way a deployment
runs it. ``--from-record`` starts from the run-config a run record ran with (its
``config.json``, less what the server derived and where it wrote), so a CPU run can be
replayed on a GPU key for key; ``--run-config`` pairs then replace keys. ``--app`` runs
another app folder, or an app bundle (FAB) ``flwr build`` made: Flower 1.42's ``flwr run``
takes a folder (or a platform app ``@account/app``), not a ``.fab`` file, so the FAB is
unpacked by ``flwr install`` (which checks every file's SHA-256 against the bundle's
manifest) into the launcher's own Flower home and that folder is run; Flower packs it
again into the very same bytes (fixed dates, sorted entries: checked here before the run),
so the SuperLink runs the FAB's SHA-256, which the run's record keeps (``fab_hash``).
The run-config takes the same ``key=value`` pairs as ``simulations.simulate``
(strings unquoted); paths resolve against the current directory. Ports are free ones picked
at start, so several launches and ``flwr run``'s fixed local ports do not collide. Every
process started here is stopped by its process group on exit, on Ctrl-C and on SIGTERM/SIGHUP
(``timeout``, a scheduler); nothing else is touched.

Exit status: 0 when the run's record says finished, 1 when it failed or wrote none, 2 for
a configuration error.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from fedtext.common.config import DERIVED_KEYS, ConfigError, RunConfig
from fedtext.node.warm_exec import WARM_START, WARM_STARTS
from fedtext.records.signals import install_unless_ignored

REPO = Path(__file__).resolve().parents[1]
CLIS = ("flwr", "flower-superlink", "flower-supernode")
# <logs>/nodes.json: how the launcher started its SuperNodes (write_nodes), read by the deployment study to say how
# a run's warm ClientApp processes were made (a run whose logs have none predates it: spawned, the default then)
NODES = "nodes.json"


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on now on ``host`` (the kernel's pick for port 0); the
    system tests take theirs from here too."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def free_ports(n: int, host: str = "127.0.0.1") -> list[int]:
    """``n`` distinct free TCP ports on ``host``: all bound at once, so the kernel cannot hand
    out one twice (``flwr run``'s local SuperLink needs two of its own)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for sock in socks:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def listening(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something accepts TCP connections on ``host:port``."""
    with socket.socket() as s:
        return s.connect_ex((host, port)) == 0


def record_overrides(record: Path) -> dict[str, Any]:
    """The run-config the run in folder ``record`` ran with: its ``config.json``'s keys less
    the ones the server derived (:data:`fedtext.common.config.DERIVED_KEYS`) and ``output-dir``
    (where it wrote, which a replay sets itself)."""
    path = record / "config.json"
    if not path.exists():
        raise ConfigError(f"--from-record {record}: no config.json there (not a run record folder)")
    config = json.loads(path.read_text())["config"]
    return {k: v for k, v in config.items() if k not in DERIVED_KEYS and k != "output-dir"}


def flwr_run_config(pairs: dict[str, Any]) -> str:
    """``{"method": "fedbpt", "alpha": 0.5, "x": True}`` -> ``"method='fedbpt' alpha=0.5 x=true"``:
    ``flwr run``'s run-config syntax (TOML values: strings quoted, numbers bare, booleans
    lower-case)."""
    out = []
    for key, value in pairs.items():
        if isinstance(value, bool):
            out.append(f"{key}={str(value).lower()}")
        elif isinstance(value, str):
            if "'" in value:
                raise ConfigError(f"run-config value of {key} contains a single quote: {value!r}")
            out.append(f"{key}='{value}'")
        else:
            out.append(f"{key}={value}")
    return " ".join(out)


def cli(name: str) -> str:
    """Flower's console script ``name``: beside this interpreter, else on PATH."""
    here = Path(sys.executable).parent / name
    found = str(here) if here.exists() else shutil.which(name)
    if not found:
        raise ConfigError(f"{name} not found beside {sys.executable} or on PATH (pip install flwr)")
    return found


TOKEN_VAR = "FEDTEXT_DEPLOYMENT_TOKEN"  # set in every process this launcher starts, and inherited


def processes_with(token: str, var: str = TOKEN_VAR) -> list[int]:
    """PIDs whose environment holds ``<var>=<token>`` (other than this process): what a launch
    started, however detached (the SuperLink starts each ServerApp, a SuperNode each ClientApp,
    as processes of their own that may outlive their parent's process group). The tests find
    what they started the same way (``tests/conftest.py``, ``FEDTEXT_TEST_TOKEN``)."""
    needle = f"{var}={token}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                if needle in (proc / "environ").read_bytes().split(b"\0"):
                    found.append(int(proc.name))
            except OSError:  # gone, or another user's
                pass
    return found


class Processes:
    """Processes started here, each in its own session so that its group (a SuperNode's
    ClientApp children included) is stopped with it, by PID; then any process still carrying
    this launch's token (a ServerApp or ClientApp that left its group), by PID."""

    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.token = uuid.uuid4().hex
        self.env, self.logs, self.started = {**env, TOKEN_VAR: self.token}, logs, []

    def log(self, name: str) -> Path:
        """Where :meth:`start` writes the output of the process it started as ``name``."""
        return self.logs / f"{name}.log"

    def start(self, name: str, cmd: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        """Start ``cmd`` in a session of its own, output to :meth:`log` (``<logs>/<name>.log``);
        ``env`` adds to the launch's environment."""
        log = self.log(name).open("w")
        proc = subprocess.Popen(cmd, cwd=REPO, env={**self.env, **(env or {})}, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        self.started.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.started:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.started:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                # reap it: a SIGKILL is delivered asynchronously (CI, 2026-12-01: a caller polling right after
                # saw the leader still running); 30 s only bounds a stuck kernel
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=30)
        for sig, grace in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
            left = processes_with(self.token)
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            deadline = time.time() + grace
            while left and time.time() < deadline:
                time.sleep(0.2)
                left = processes_with(self.token)
            if not left:
                return


def install_fab(fab: Path, home: Path, env: dict[str, str]) -> Path:
    """``flwr install`` the app bundle ``fab`` into the Flower home ``home``; return the
    app's folder there (``<home>/apps/<publisher>.<name>.<version>.<hash8>``), checked to
    pack again into ``fab``'s very bytes: what ``flwr run <folder>`` submits is then the
    FAB itself, byte for byte (raises ``ConfigError`` otherwise, or when ``fab`` is no FAB)."""
    from flwr.cli.build import build_fab_from_disk  # Flower's own packing, as `flwr run` does it

    if fab.suffix != ".fab" or not fab.is_file():
        raise ConfigError(f"--app {fab}: not a .fab file (make one with `flwr build`)")
    done = subprocess.run([cli("flwr"), "install", str(fab)], env={**env, "FLWR_HOME": str(home)},
                          capture_output=True, text=True, timeout=120)
    apps = sorted((home / "apps").glob("*")) if (home / "apps").is_dir() else []
    if done.returncode != 0 or len(apps) != 1:
        raise ConfigError(f"--app {fab}: flwr install failed: {(done.stdout + done.stderr).strip()[-500:]}")
    want = hashlib.sha256(fab.read_bytes()).hexdigest()
    got = hashlib.sha256(build_fab_from_disk(apps[0])).hexdigest()
    if got != want:
        raise ConfigError(f"--app {fab}: the installed app packs into {got[:8]}..., not the FAB's {want[:8]}... "
                          "(this Flower's flwr run would submit other bytes)")
    return apps[0]


def app_folder(app: Path, home: Path, env: dict[str, str]) -> Path:
    """The folder ``flwr run`` submits for ``--app``: a ``.fab`` file is installed first
    (:func:`install_fab`), an app folder (one holding a ``pyproject.toml``) is taken as it is;
    anything else raises ``ConfigError`` before any process starts."""
    if app.suffix == ".fab":
        return install_fab(app.resolve(), home, env)
    if (app / "pyproject.toml").is_file():
        return app.resolve()
    raise ConfigError(f"--app {app}: not an app folder (no pyproject.toml there) or a .fab file (`flwr build` makes one)")


def start_superlink(procs: Processes, port: int, timeout_s: float = 120.0) -> subprocess.Popen:
    """An insecure ``flower-superlink`` on 127.0.0.1:``port`` (log ``procs.log("superlink")``), its empty
    pulls held until a message comes (``python -m fedtext.server.superlink``, as deploy/superlink.sh),
    returned once it listens; raises ``RuntimeError`` if it exits or does not listen in time."""
    link = procs.start("superlink", [sys.executable, "-m", "fedtext.server.superlink", "--insecure", "--host",
                                     "127.0.0.1", "--port", str(port), "--disable-runtime-dependency-installation"])
    deadline = time.time() + timeout_s
    while not listening(port):
        if link.poll() is not None or time.time() > deadline:
            raise RuntimeError(f"the SuperLink did not listen on {port}: see {procs.log('superlink')}")
        time.sleep(0.5)
    return link


def supernode_threads(num_supernodes: int, cores: int | None = None) -> int:
    """Each SuperNode's share of this machine's cores (at least 1): its torch threads, as
    separate boards would each have their own, so that the SuperNodes' fits running at once do
    not fight over the same cores (a Ray simulation runs its actors' fits in turn on all)."""
    return max(1, (cores or os.cpu_count() or 1) // max(1, num_supernodes))


def supernode_command(i: int, num_supernodes: int, superlink_port: int, node_service: bool,
                      threads: int, warm: int | None = None, warm_start: str | None = None) -> list[str]:
    """SuperNode ``i``'s command: ``flower-supernode`` holding partition i of N, behind fedtext's
    node service (``python -m fedtext.node.service --threads T -- flower-supernode ...``,
    docs/deployment.md) unless ``node_service`` is false; ``warm``, ``warm_start``: the service's
    ``--warm-clientapps`` and ``--warm-start`` (None: its defaults, :data:`fedtext.node.service.WARM_CLIENTAPPS`
    and :data:`fedtext.node.warm_exec.WARM_START`)."""
    node = [cli("flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{superlink_port}",
            "--port", str(free_port()), "--node-config", f"partition-id={i} num-partitions={num_supernodes}"]
    if not node_service:
        return node
    warm_args = [] if warm is None else ["--warm-clientapps", str(warm)]
    warm_args += [] if warm_start is None else ["--warm-start", warm_start]
    return [sys.executable, "-m", "fedtext.node.service", "--threads", str(threads), *warm_args, "--", *node]


def write_nodes(logs: Path, node_service: bool, warm: int | None, warm_start: str | None) -> dict[str, Any]:
    """``<logs>/nodes.json`` (:data:`NODES`): the node service or not, and its warm ClientApp processes,
    the service's defaults resolved (:data:`fedtext.node.service.WARM_CLIENTAPPS`, :data:`WARM_START`)."""
    from fedtext.node.service import WARM_CLIENTAPPS

    warm = (WARM_CLIENTAPPS if warm is None else warm) if node_service else 0
    nodes = {"node_service": node_service, "warm_clientapps": warm,
             "warm_start": (warm_start or WARM_START) if warm else None}
    (logs / NODES).write_text(json.dumps(nodes) + "\n")
    return nodes


def deploy(overrides: dict[str, Any], num_supernodes: int, output_dir: Path, logs: Path,
           timeout_s: float = 3600.0, app: Path = REPO, node_service: bool = True,
           warm: int | None = None, warm_start: str | None = None) -> Path | None:
    """Run ``overrides`` on a loopback SuperLink with ``num_supernodes`` SuperNodes; return
    the run's record folder (a resumed run's, ``resume=``, is its own folder; None when none was
    written). Logs of every process go to
    ``logs``. ``app``: the app folder ``flwr run`` submits (default this checkout), or a
    ``.fab`` file ``flwr build`` made (:func:`install_fab`). ``node_service``: each SuperNode
    runs behind fedtext's node service (:mod:`fedtext.node.service`); without it every message
    starts a ClientApp process that loads everything anew. Either way each SuperNode's torch
    threads are its share of the cores (:func:`supernode_threads`). ``warm``: ClientApp processes
    each SuperNode keeps ready (:mod:`fedtext.node.warm_exec`; None: the node service's default, 0: none),
    ``warm_start`` how they are made (None: the service's default)."""
    from fedtext.common.registry import METHODS

    output_dir = output_dir.resolve()
    pairs = {**overrides, "output-dir": str(output_dir)}
    RunConfig.from_run_config(pairs, METHODS)  # fail before anything starts
    logs.mkdir(parents=True, exist_ok=True)
    write_nodes(logs, node_service, warm, warm_start)
    output_dir.mkdir(parents=True, exist_ok=True)
    before = set(output_dir.glob("*/config.json"))
    home = Path(tempfile.mkdtemp(prefix="fedtext-flwr-home-"))
    port = free_port()
    (home / "config.toml").write_text(
        f'[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = "127.0.0.1:{port}"\ninsecure = true\n')
    env = {**os.environ, "FLWR_HOME": str(home), "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
           "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1"}
    procs = Processes(env, logs)
    try:
        app_dir = app_folder(app, home, env)
        start_superlink(procs, port)
        threads = supernode_threads(num_supernodes)
        for i in range(num_supernodes):  # OMP_NUM_THREADS: torch's threads in a ClientApp process
            procs.start(f"supernode-{i}", supernode_command(i, num_supernodes, port, node_service, threads, warm,
                                                                      warm_start),
                        env={"OMP_NUM_THREADS": str(threads)})
        run = procs.start("flwr-run", [cli("flwr"), "run", str(app_dir), "local", "--stream",
                                       "--run-config", flwr_run_config(pairs)])
        try:
            run.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            print(f"fedtext: the run did not end within {timeout_s:.0f} s", file=sys.stderr)
    finally:
        procs.stop_all()
        shutil.rmtree(home, ignore_errors=True)
    return record_folder(output_dir, before, overrides)


def record_folder(output_dir: Path, before: set[Path], overrides: dict[str, Any]) -> Path | None:
    """The record folder a launch left in ``output_dir``: the newest whose ``config.json`` is not
    in ``before`` (the ones there at launch), else, for ``resume=<run id>``, that run's own folder
    (a resumed run writes on in it: the launcher said "wrote no record" and exited 1 after a
    resume that finished); None when neither."""
    new = sorted(set(output_dir.glob("*/config.json")) - before)
    if new:
        return new[-1].parent
    resumed = overrides.get("resume")
    return output_dir / str(resumed) if resumed and (output_dir / str(resumed) / "config.json").is_file() else None


def _stop_on_signal(signum: int, frame: object) -> None:
    """SIGTERM/SIGHUP (``timeout``, a job scheduler, a closed terminal) end the launcher as an
    exception, so :func:`deploy`'s ``finally`` stops what it started: Python's default for
    SIGTERM ends the process at once, leaving the SuperLink and SuperNodes running (found on
    2026-11-26: ``timeout 100 python -m simulations.deployment`` left 105 processes behind)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one clean-up, not one per repeated signal
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    from simulations.simulate import parse_pairs

    install_unless_ignored((signal.SIGTERM, signal.SIGHUP), _stop_on_signal)  # nohup's SIGHUP stays ignored

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--num-supernodes", type=int, default=4, help="SuperNodes, one partition each (default 4)")
    ap.add_argument("--run-config", default="", help="space-separated key=value overrides of pyproject's run-config")
    ap.add_argument("--from-record", default="", help="a run record folder: start from the run-config it ran with")
    ap.add_argument("--output-dir", default="runs", help="where the run record goes (default ./runs)")
    ap.add_argument("--logs", default="", help="folder for the processes' logs (default <output-dir>/deployment-logs)")
    ap.add_argument("--timeout-s", type=float, default=3600.0, help="stop everything after this long (default 3600)")
    ap.add_argument("--no-node-service", action="store_true",
                    help="SuperNodes without fedtext's node service: every message starts a ClientApp that loads "
                         "everything anew (Flower's default; docs/performance.md compares)")
    ap.add_argument("--warm-clientapps", type=int, default=None,
                    help="ClientApp processes each SuperNode keeps started ahead of need (default: the node "
                         "service's; 0: Flower's cold flwr-clientapp per message; fedtext.node.warm_exec)")
    ap.add_argument("--warm-start", choices=WARM_STARTS, default=None,
                    help="how each SuperNode makes its ready ClientApp processes (default: the node service's; "
                         "fork: forked from a fork server that imported Flower once; spawn: a new Python each; "
                         "fedtext.node.warm_exec)")
    ap.add_argument("--app", default=str(REPO),
                    help="the app to run: a folder (default this checkout) or a .fab file that `flwr build` made")
    args = ap.parse_args(argv)
    try:
        for name in CLIS:
            cli(name)
        out = Path(args.output_dir)
        base = record_overrides(Path(args.from_record)) if args.from_record else {}
        record = deploy({**base, **parse_pairs(args.run_config)}, args.num_supernodes, out,
                        Path(args.logs) if args.logs else out / "deployment-logs", args.timeout_s, Path(args.app),
                        node_service=not args.no_node_service, warm=args.warm_clientapps,
                        warm_start=args.warm_start)
    except ConfigError as exc:
        print(f"fedtext: configuration error: {exc}", file=sys.stderr)
        return 2
    if record is None:
        print("fedtext: the run wrote no record (see the logs)", file=sys.stderr)
        return 1
    summary = json.loads((record / "summary.json").read_text()) if (record / "summary.json").exists() else {}
    status = summary.get("status", "unknown")
    print(f"fedtext: run {record.name} {status}")
    return 0 if status == "finished" else 1


if __name__ == "__main__":
    sys.exit(main())
