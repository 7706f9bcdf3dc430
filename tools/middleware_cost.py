"""What the SuperLink's middleware costs a request: CPU per request through Flower's own SuperLink middleware
list (``flwr.superlink.main._get_middleware``) around one trivial route, as Flower builds it and as fedtext's
SuperLink scopes it (:func:`fedtext.server.superlink.scoped`), for a Runtime path (the ServerApp's requests)
and a Fleet path (the SuperNodes'), and for N pass-through ``BaseHTTPMiddleware`` layers.

    python tools/middleware_cost.py [--requests 1500]

Requests go in-process through httpx's ASGI transport (no socket, no server), so the figure is the
middleware and routing alone, the client's share included and equal in every row. CPU is this process's
``time.process_time`` over the requests after 50 unmeasured ones. docs/performance.md quotes it.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.middleware import Middleware  # noqa: E402
from starlette.middleware.base import BaseHTTPMiddleware  # noqa: E402
from starlette.responses import Response  # noqa: E402
from starlette.routing import Route  # noqa: E402

from fedtext.server import superlink  # noqa: E402

PATHS = {"runtime": "/v1/runtime/x", "fleet": "/v1/fleet/x"}  # outside every scoped prefix / the Fleet one's


class PassOn(BaseHTTPMiddleware):
    """A layer that only hands the request on: what a scoped layer is for a request outside its API."""

    async def dispatch(self, request, call_next):
        return await call_next(request)


def app(middleware: list[Middleware]) -> Starlette:
    async def ok(request):
        await request.body()
        return Response(b"x" * 100)

    return Starlette(routes=[Route(p, ok, methods=["POST"]) for p in PATHS.values()], middleware=middleware)


def cpu_ms(application: Starlette, path: str, requests: int) -> float:
    """CPU milliseconds a request (this process: client and app) over ``requests`` POSTs to ``path``."""
    async def run() -> float:
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://superlink") as client:
            for _ in range(50):
                await client.post(path, content=b"y" * 200)
            t0 = time.process_time()
            for _ in range(requests):
                response = await client.post(path, content=b"y" * 200)
                if response.status_code != 200:
                    raise RuntimeError(f"{path}: {response.status_code} {response.text[:200]}")
            return (time.process_time() - t0) / requests * 1000

    return asyncio.run(run())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1500)
    args = ap.parse_args(argv)
    flowers = superlink.flowers(importlib.import_module(superlink.SUPERLINK_APP)._get_middleware)()
    print(f"{platform.processor() or platform.machine()}, {time.strftime('%Y-%m-%d')}: CPU ms a request, "
          f"{args.requests} requests each")
    for layers in (0, 2, 8):
        ms = cpu_ms(app([Middleware(PassOn)] * layers), PATHS["runtime"], args.requests)
        print(f"  {layers} pass-through layers: {ms:.2f}")
    for name, stack in (("Flower's 8 layers", flowers), ("scoped (fedtext)", superlink.scoped(flowers))):
        figures = ", ".join(f"{api} {cpu_ms(app(stack), path, args.requests):.2f}" for api, path in PATHS.items())
        print(f"  {name}: {figures}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
