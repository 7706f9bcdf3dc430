#!/usr/bin/env python3
"""The public face of a SuperLink: forwards the Fleet API (what SuperNodes call), refuses the rest.

Flower 1.41's `flower-superlink` serves its Fleet, Control and Runtime APIs on ONE HTTPS
listener (`--host/--port`); the Control API (`flwr run`, `flwr ls`, `flwr supernode
register/unregister/ls`) has no authentication of its own in the open-source package. So
the SuperLink listens on loopback only (deploy/superlink.sh) and this gateway, on the
address SuperNodes reach, terminates TLS with the SuperLink's own certificate and forwards
exactly the 12 Fleet routes (POST /v1/fleet/<name>, no query string) to it over TLS
(verified against ca.crt). Any other method, path or query, Control and Runtime routes
included, gets 403 and never reaches the SuperLink. SuperNode authentication is untouched:
the SuperLink still checks every Fleet request's signature and registered key.

usage: python deploy/fleet_gateway.py --listen HOST:PORT --superlink 127.0.0.1:PORT --certs DIR
  --listen HOST:PORT     where SuperNodes connect (e.g. 0.0.0.0:9092)
  --superlink HOST:PORT  the SuperLink's loopback listener (deploy/superlink.sh --port)
  --certs DIR            DIR/{ca.crt,server.crt,server.key} from deploy/make_certs.sh
Runs in the foreground; its PID is the gateway's. Stop it with `kill PID`.
See docs/deployment.md.
"""

from __future__ import annotations

import argparse
import logging
import ssl
import sys
from pathlib import Path

import httpx
import uvicorn

# Every route flower-supernode 1.41 calls (flwr/supernode/fleet_http_client.py).
FLEET_ROUTES = frozenset(
    f"/v1/fleet/{name}"
    for name in (
        "register-node", "activate-node", "deactivate-node", "unregister-node",
        "send-node-heartbeat", "pull-messages", "push-messages", "get-run", "get-fab",
        "push-object", "pull-object", "confirm-message-received",
    )
)
# Not forwarded: connection-level headers, and headers that would let a client claim
# another origin address to the SuperLink.
DROP_REQUEST = frozenset({
    "host", "connection", "keep-alive", "proxy-connection", "proxy-authorization", "te",
    "trailer", "transfer-encoding", "upgrade", "forwarded", "x-forwarded-for",
    "x-forwarded-host", "x-forwarded-proto", "x-forwarded-port", "x-real-ip",
})
DROP_RESPONSE = frozenset({
    "connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
    "upgrade", "date", "server",
})
log = logging.getLogger("fleet_gateway")


def allowed(scope: dict) -> bool:
    """Only POST to one of the Fleet routes, spelled exactly, with no query string."""
    raw = scope.get("raw_path") or scope["path"].encode("utf-8")
    return (scope["method"] == "POST" and not scope.get("query_string")
            and raw.decode("latin-1") in FLEET_ROUTES)


def make_app(superlink: str, ca_file: str):
    """ASGI app forwarding allowed requests to https://SUPERLINK, 403 for the rest."""
    state: dict[str, httpx.AsyncClient] = {}

    async def refuse(send, status: int, text: str) -> None:
        body = text.encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"text/plain"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def app(scope, receive, send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    state["client"] = httpx.AsyncClient(
                        base_url=f"https://{superlink}", verify=ssl.create_default_context(cafile=ca_file),
                        timeout=httpx.Timeout(300.0, connect=10.0))
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await state["client"].aclose()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        if not allowed(scope):
            log.warning("refused %s %s from %s", scope["method"], scope["path"],
                        (scope.get("client") or ("?",))[0])
            await refuse(send, 403, "Forbidden: this address serves only the Flower Fleet API.\n")
            return

        async def body():
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return
                if message.get("body"):
                    yield message["body"]
                if not message.get("more_body"):
                    return

        headers = [(k, v) for k, v in scope["headers"] if k.decode("latin-1").lower() not in DROP_REQUEST]
        client = state["client"]
        try:
            request = client.build_request("POST", scope["path"], headers=headers, content=body())
            response = await client.send(request, stream=True)
        except httpx.HTTPError as exc:
            log.warning("SuperLink unreachable: %s", exc)
            await refuse(send, 502, "Bad gateway: the SuperLink did not answer.\n")
            return
        try:
            await send({"type": "http.response.start", "status": response.status_code,
                        "headers": [(k, v) for k, v in response.headers.raw
                                    if k.decode("latin-1").lower() not in DROP_RESPONSE]})
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await response.aclose()

    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True, help="HOST:PORT SuperNodes connect to")
    parser.add_argument("--superlink", required=True, help="the SuperLink's loopback HOST:PORT")
    parser.add_argument("--certs", required=True, help="DIR with ca.crt, server.crt, server.key")
    args = parser.parse_args(argv)
    certs = Path(args.certs)
    for name in ("ca.crt", "server.crt", "server.key"):
        if not (certs / name).is_file():
            sys.exit(f"missing {certs / name}: run deploy/make_certs.sh {certs} N HOST first")
    host, _, port = args.listen.rpartition(":")
    if not host or not port.isdigit():
        sys.exit(f"--listen wants HOST:PORT, got {args.listen!r}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s fleet_gateway %(levelname)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # uvicorn's access log has each request
    log.info("forwarding POST /v1/fleet/* from %s to https://%s; everything else gets 403",
             args.listen, args.superlink)
    uvicorn.run(make_app(args.superlink, str(certs / "ca.crt")), host=host.strip("[]"), port=int(port),
                ssl_certfile=str(certs / "server.crt"), ssl_keyfile=str(certs / "server.key"),
                proxy_headers=False, server_header=False, lifespan="on", log_level="info")


if __name__ == "__main__":
    main()
