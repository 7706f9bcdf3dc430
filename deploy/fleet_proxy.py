#!/usr/bin/env python3
"""nginx in front of a SuperLink: the Fleet API (what SuperNodes call) only, with bounds.

Flower 1.42's ``flower-superlink`` serves its Fleet, Control and Runtime APIs on ONE HTTPS
listener, and the Control API (``flwr run``, ``flwr ls``, ``flwr supernode register``) has
no authentication in the open-source package. So the SuperLink listens on loopback only
(deploy/superlink.sh) and nginx (Debian's ``nginx`` package), on the address SuperNodes
reach, serves exactly the 12 Fleet routes and bounds what any caller can make the SuperLink
do. This script writes nginx's configuration from ``deploy/nginx/fleet.conf.template``
and runs nginx in the foreground (``exec``: its PID is nginx's master; stop it with
``kill PID``).

The body cap, and how it is computed
------------------------------------
Every request a SuperNode sends is small (heartbeats, pulls, message metadata) except
``push-object``, which carries one object of a message: a record, an ``Array`` header or
one ``ArrayChunk`` of an array's bytes. Flower splits every array into chunks of at most
``FLWR_PRIVATE_MAX_ARRAY_CHUNK_SIZE`` bytes (5 MiB in Flower 1.42). fedtext's ClientApp joins a
reply's arrays under 1 MiB into one ``Array`` and sends a whole reply of at most 1 MiB as one
record (:mod:`fedtext.common.packing`: ``pack``, ``seal``), so one object can hold every array a
client uploads, and::

    largest object = min(chunk, all the arrays a client of the method uploads, in bytes)
    cap            = max over the served methods of (largest object) + 64 KiB

where "the arrays a client uploads" come from the method's own
:meth:`fedtext.learning.model.Model.upload_specs` built for this run-config (shape x dtype size; a
spec without a fixed shape counts as a whole chunk), and 64 KiB covers protobuf framing, the
object header and a message's metric and config records (measured in
tests/system/test_deploy.py: fedprompt's 12,288-byte prompt gives a cap of 77,824 bytes, and
the largest request of its 2-round run was 13,407 bytes). bbt-fed's and fedbpt's caps are
smaller; methods that upload encoder weights (fedavg, the FeS family) get a whole chunk +
64 KiB (5,308,416 bytes).

With ``secagg=true`` in ``--run-config`` a fit reply is not the arrays: Flower's ``secaggplus_mod``
answers the masked-vector stage with ONE ``ConfigRecord`` of NPY blobs of int64 (``ndarray_to_bytes``
of the weight factor and of every upload array, quantised and masked), and Flower never chunks a
``ConfigRecord``. So that object is::

    masked vector = sum over the n upload arrays of (NPY header + 8 x values) + (NPY header + 8)

(header: 128 bytes for these shapes, numpy's own ``write_array_header_1_0``), with no chunk
bound, twice a float32 upload and more. The protocol's other replies grow with a client's
neighbours (``secagg-shares``, or every client of the round when it is 1): the share-keys reply
carries an encrypted pair of key shares for each, 625 bytes a neighbour (measured with Flower 1.42's
own stage functions: 1,301 bytes at 3 neighbours, 93,184 at 150; setup 476, unmask at most ~200 a
neighbour), bounded here by ``640 x (neighbours - 1) + 2 KiB``. The cap takes the largest of the
arrays, the masked vector and that bound. fedlora's masked vector is 599,448 bytes against its
297,992 bytes of arrays (nginx would answer 413 under the plain cap); fedprompt's cap would refuse
a share-keys reply past ~140 neighbours without the bound. ``secagg-shares=1`` with
``clients-per-round=0`` (every connected client) leaves the neighbours unbounded: refused.

usage: python deploy/fleet_proxy.py --listen HOST:PORT --superlink 127.0.0.1:PORT --certs DIR --dir RUNDIR
           [--methods M ...] [--run-config "k=v ..."] [--print-only]
See docs/deployment.md.
"""

from __future__ import annotations

import argparse
import os
import pwd
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fedtext.common.comm import ArraySpec

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE / "nginx" / "fleet.conf.template"
FRAMING = 64 * 1024  # protobuf framing, object header, metric/config records (see the module docstring)
SECAGG_SHARE_BYTES = 640  # a SecAgg+ share-keys reply's bytes a neighbour (625 measured: encrypted key shares + ids)
SECAGG_STAGE_BYTES = 2 * 1024  # the rest of a setup, share-keys or unmask reply (476-1,301 bytes measured)
PLACEHOLDER = re.compile(r"@([a-z_]+)@")
NGINX_TMP = ("body", "proxy", "fastcgi", "uwsgi", "scgi")


@dataclass(frozen=True)
class Cap:
    """The body cap and the method and array that set it."""

    bytes: int
    method: str
    array: str
    array_bytes: int
    chunk: int
    chunked: bool = True  # arrays are cut into chunks by Flower; a SecAgg+ masked vector (a ConfigRecord) is not

    @property
    def reason(self) -> str:
        whole = self.chunked and self.array_bytes >= self.chunk
        return (f"{self.method}'s largest upload object is {self.array} ({self.array_bytes:,} bytes"
                f"{', one Flower chunk' if whole else ''}) + {FRAMING:,} bytes of framing")


def upload_bytes(specs: list["ArraySpec"], chunk: int) -> tuple[str, int]:
    """What the largest object of a reply holding ``specs`` is, and its bytes: all of them together
    (packed and sealed as one object, :mod:`fedtext.common.packing`), at most one chunk."""
    total = min(sum(spec_bytes(spec, chunk) for spec in specs), chunk)
    name = specs[0].name if len(specs) == 1 else f"its {len(specs)} upload arrays together"
    return name, total


def masked_bytes(specs: list["ArraySpec"]) -> tuple[str, int]:
    """What SecAgg+'s masked-vector reply for uploads of ``specs`` holds, and its bytes: one NPY blob
    of int64 a value (``ndarray_to_bytes``) for every upload array and one for the weight factor
    (Flower's ``factor_combine`` puts ``[q_ratio]`` first), in one ``ConfigRecord``, never chunked.

    A spec without a fixed shape could be any size: it counts as a whole chunk of values (8 bytes
    each), the most a plain upload of it could be cut to.
    """
    import io

    import numpy as np
    from flwr.common.constant import FLWR_PRIVATE_MAX_ARRAY_CHUNK_SIZE as chunk

    def blob(shape: tuple[int, ...]) -> int:
        header = io.BytesIO()  # numpy's own header for this shape (128 bytes here), as np.save writes it
        np.lib.format.write_array_header_1_0(
            header, {"descr": np.lib.format.dtype_to_descr(np.dtype(np.int64)), "fortran_order": False, "shape": shape})
        return header.tell() + 8 * int(np.prod(shape, dtype=np.int64))

    total = blob((1,)) + sum(blob(s.shape) if s.shape is not None else blob((chunk,)) for s in specs)
    return f"its SecAgg+ masked vector ({len(specs) + 1} int64 NPY blobs, one ConfigRecord)", total


def secagg_stage_bytes(neighbours: int) -> int:
    """The largest SecAgg+ reply but the masked vector, for a client with ``neighbours`` (itself
    included): its share-keys reply, one encrypted pair of key shares a neighbour but itself
    (module docstring; checked against Flower's own stage functions by a test)."""
    return SECAGG_SHARE_BYTES * (neighbours - 1) + SECAGG_STAGE_BYTES


def spec_bytes(spec: "ArraySpec", chunk: int) -> int:
    """Bytes one uploaded array of ``spec`` occupies on the wire, at most one chunk.

    A spec without a fixed shape could be any size: it counts as a whole chunk (the most
    Flower puts in one object); else :meth:`fedtext.common.comm.ArraySpec.nbytes`.
    """
    return chunk if spec.shape is None else min(spec.nbytes(), chunk)


def body_cap(methods: list[str], run_config: dict[str, object]) -> Cap:
    """The ``client_max_body_size`` for SuperNodes of ``methods`` under ``run_config``.

    Builds each method's :class:`fedtext.learning.model.Model` exactly as its strategy does (the
    run's data, task and backbone), then applies the formula of the module docstring.
    """
    from flwr.common.constant import FLWR_PRIVATE_MAX_ARRAY_CHUNK_SIZE as chunk

    from fedtext.backbone import backbone_for
    from fedtext.common.config import RunConfig
    from fedtext.common.errors import ConfigError
    from fedtext.learning.data import labelled
    from fedtext.common.registry import METHODS

    best: Cap | None = None
    for method in methods:
        cfg = RunConfig.from_run_config({**run_config, "method": method}, METHODS)
        task = labelled(cfg).task
        model = cfg.method_config.model_class()(cfg, backbone_for(cfg, task))
        specs = list(model.upload_specs())
        objects = [(*upload_bytes(specs, chunk), True)]  # (what, bytes, cut into chunks by Flower)
        if cfg.secagg:  # the masked-vector reply replaces the arrays; the share-keys reply grows with the neighbours
            neighbours = cfg.secagg_shares if cfg.secagg_shares != 1 else cfg.clients_per_round
            if neighbours <= 0:
                raise ConfigError("secagg-shares=1 with clients-per-round=0 gives each client every connected client "
                                  "as a neighbour, so no body cap fits its share-keys reply: set clients-per-round "
                                  "or secagg-shares")
            share_keys = f"its SecAgg+ share-keys reply ({neighbours} neighbours)"
            objects += [(*masked_bytes(specs), False), (share_keys, secagg_stage_bytes(neighbours), False)]
        name, size, chunked = max(objects, key=lambda o: o[1])  # the first of the largest: arrays, then masked vector
        if best is None or size + FRAMING > best.bytes:
            best = Cap(size + FRAMING, method, name, size, chunk, chunked)
    assert best is not None, "no method given"
    return best


def render(values: dict[str, object]) -> str:
    """The template with every ``@name@`` filled (``$`` is nginx's; a name without a value,
    or a value the template does not use, is an error)."""
    text = TEMPLATE.read_text()
    used = set(PLACEHOLDER.findall(text))
    if used != set(values):
        raise KeyError(f"template names {sorted(used)} but values are for {sorted(values)}")
    return PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), text)


def worker_user() -> str:
    """The ``user`` line: nginx's workers leave root for ``nobody`` (group ``nogroup``) when
    the master runs as root; otherwise they run as the caller and the line is empty."""
    return "user nobody nogroup;" if os.geteuid() == 0 else ""


def prepare(run_dir: Path) -> None:
    """Make RUNDIR and nginx's temporary folders, writable by its workers."""
    for name in NGINX_TMP:
        (run_dir / "tmp" / name).mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0:
        nobody = pwd.getpwnam("nobody")
        for name in NGINX_TMP:
            os.chown(run_dir / "tmp" / name, nobody.pw_uid, nobody.pw_gid)


def parse_pairs(text: str) -> dict[str, object]:
    """``k=v k2=v2`` as Flower's ``--run-config`` parses it (TOML values)."""
    from flwr.common.config import parse_config_args

    return dict(parse_config_args([text])) if text.strip() else {}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", required=True, help="HOST:PORT SuperNodes connect to (e.g. 0.0.0.0:9092)")
    ap.add_argument("--superlink", required=True, help="the SuperLink's loopback HOST:PORT (deploy/superlink.sh)")
    ap.add_argument("--certs", required=True, help="DIR with ca.crt, server.crt, server.key (deploy/make_certs.sh)")
    ap.add_argument("--dir", required=True, help="where nginx's configuration, logs, pid and buffers go")
    ap.add_argument("--methods", nargs="+", default=None,
                    help="the methods this federation runs (the body cap fits the largest; default: every method)")
    ap.add_argument("--run-config", default="",
                    help="run-config overrides the runs use (prompt length, d, model; secagg=true with --methods "
                         "naming methods that take it)")
    ap.add_argument("--rate", type=int, default=100, help="requests per second per client address (limit_req)")
    ap.add_argument("--burst", type=int, default=2000,
                    help="requests above the rate served at once (a fedavg upload is ~300 push-object calls)")
    ap.add_argument("--conn-per-ip", type=int, default=64, help="open requests per client address (limit_conn)")
    ap.add_argument("--header-timeout", default="10s", help="close a connection whose header stalls this long")
    ap.add_argument("--body-timeout", default="20s", help="close a connection whose body stalls this long")
    ap.add_argument("--worker-connections", type=int, default=4096, help="connections nginx holds at once")
    ap.add_argument("--nginx", default=shutil.which("nginx") or "/usr/sbin/nginx", help="the nginx binary")
    ap.add_argument("--print-only", action="store_true", help="write the configuration, print the cap, exit")
    args = ap.parse_args(argv)

    certs, run_dir = Path(args.certs).resolve(), Path(args.dir).resolve()
    for name in ("ca.crt", "server.crt", "server.key"):
        if not (certs / name).is_file():
            sys.exit(f"missing {certs / name}: run deploy/make_certs.sh {args.certs} N HOST first")
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        sys.exit(f"--listen wants HOST:PORT, got {args.listen!r}")
    if not Path(args.nginx).is_file():
        sys.exit(f"no nginx at {args.nginx}: install Debian's package (apt-get install nginx) or give --nginx")
    sys.path.insert(0, str(HERE.parent))  # fedtext from this checkout, as the SuperLink runs it
    from fedtext.common.errors import ConfigError
    from fedtext.common.registry import METHODS

    methods = args.methods or list(METHODS)
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        sys.exit(f"unknown method(s) {', '.join(unknown)}; known: {', '.join(METHODS)}")
    try:
        cap = body_cap(methods, parse_pairs(args.run_config))
    except ConfigError as exc:
        sys.exit(f"fleet_proxy: configuration error: {exc}")
    prepare(run_dir)
    conf = run_dir / "nginx.conf"
    conf.write_text(render({
        "generated": f"Methods: {' '.join(methods)}.",
        "listen": args.listen, "superlink": args.superlink, "certs": certs, "run_dir": run_dir,
        "body_cap": cap.bytes, "body_cap_reason": cap.reason,
        "header_timeout": args.header_timeout, "body_timeout": args.body_timeout,
        "rate": args.rate, "burst": args.burst, "conn_per_ip": args.conn_per_ip,
        "worker_connections": args.worker_connections, "rlimit_nofile": 2 * args.worker_connections + 64,
        "user_line": worker_user(),
    }))
    print(f"fleet_proxy: body cap {cap.bytes:,} bytes ({cap.reason}); configuration {conf}", flush=True)
    argv = [args.nginx, "-p", str(run_dir), "-e", str(run_dir / "error.log"), "-c", str(conf)]
    if args.print_only:
        return
    os.execv(args.nginx, argv)


if __name__ == "__main__":
    main()
