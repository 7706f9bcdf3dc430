"""fedtext's SuperLink runs each of Flower's API-scoped middleware only for its API's requests
(fedtext.server.superlink.PathScoped, scoped, scope_middleware), and checks Flower still guards them."""

from __future__ import annotations

import asyncio
import importlib
import sys

import httpx
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.responses import Response
from starlette.routing import Route

from fedtext.server import superlink


def _post_all(app: Starlette, paths: list[str]) -> list[httpx.Response]:
    async def run() -> list[httpx.Response]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://link") as client:
            return [await client.post(path, content=b"body") for path in paths]

    return asyncio.run(run())


def _echo_app(middleware: list[Middleware]) -> Starlette:
    async def echo(request):
        return Response(request.url.path.encode() + b":" + await request.body())

    paths = ("/v1/control/x", "/v1/fleet/x", "/v1/runtime/x")
    return Starlette(routes=[Route(p, echo, methods=["POST"]) for p in paths], middleware=middleware)


def test_flower_still_guards_every_middleware_fedtext_scopes():
    assert superlink.middleware_problems() == []


def test_a_guard_flower_moved_is_reported_and_nothing_is_scoped(monkeypatch):
    key = next(iter(superlink.SCOPED))
    monkeypatch.setitem(superlink.SCOPED, key, ("/v1/control/", "a guard Flower never wrote"))
    problems = superlink.middleware_problems()
    assert len(problems) == 1 and key[1] in problems[0] and "by its guard" in problems[0]
    monkeypatch.undo()
    monkeypatch.setitem(superlink.SCOPED_SOURCES, key[1], "0" * 16)  # the guard kept, something beside it changed
    (problem,) = superlink.middleware_problems()
    assert key[1] in problem and "SCOPED_SOURCES" in problem


def test_main_leaves_flowers_middleware_alone_when_a_problem_is_found(monkeypatch, capsys):
    cli = importlib.import_module("flwr.superlink.cli")  # main runs its flower_superlink last
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # main hands Flower its own argv: restored after the test

    app_module = importlib.import_module(superlink.SUPERLINK_APP)
    monkeypatch.setattr(app_module, "_get_middleware", app_module._get_middleware)  # restored after the test
    monkeypatch.setattr(superlink, "hold_pulls", lambda *a: None)
    monkeypatch.setattr(cli, "flower_superlink", lambda: 0)
    monkeypatch.setattr(superlink, "middleware_problems", lambda: ["a moved guard"])
    assert superlink.main(["--insecure"]) == 0
    assert superlink.PathScoped not in [entry.cls for entry in app_module._get_middleware()]
    assert "all of Flower's middleware: a moved guard" in capsys.readouterr().err
    monkeypatch.setattr(superlink, "middleware_problems", lambda: [])
    assert superlink.main(["--insecure"]) == 0
    assert [entry.cls for entry in app_module._get_middleware()].count(superlink.PathScoped) == 6


def test_a_scoped_layer_sees_only_the_requests_under_its_prefix_and_the_rest_pass_unchanged():
    seen: list[str] = []

    class Tagging(BaseHTTPMiddleware):  # acts on everything it is given: the scoping is PathScoped's alone
        async def dispatch(self, request, call_next):
            seen.append(request.url.path)
            response = await call_next(request)
            response.headers["x-tagged"] = "1"
            return response

    scoped = _echo_app([Middleware(superlink.PathScoped, middleware_class=Tagging, prefix="/v1/fleet/")])
    plain = _echo_app([])
    paths = ["/v1/control/x", "/v1/fleet/x", "/v1/runtime/x"]
    got, want = _post_all(scoped, paths), _post_all(plain, paths)
    assert seen == ["/v1/fleet/x"]
    assert [r.headers.get("x-tagged") for r in got] == [None, "1", None]
    assert [(r.status_code, r.content) for r in got] == [(r.status_code, r.content) for r in want]
    assert got[1].content == b"/v1/fleet/x:body"


def test_flowers_middleware_list_keeps_its_order_with_the_six_scoped_to_their_api():
    app_module = importlib.import_module(superlink.SUPERLINK_APP)
    original = superlink.flowers(app_module._get_middleware)()
    out = superlink.scoped(original)
    assert len(out) == len(original)
    expected = {getattr(importlib.import_module(m), n): prefix for (m, n), (prefix, _) in superlink.SCOPED.items()}
    scoped_count = 0
    for before, after in zip(original, out, strict=True):
        if before.cls in expected:
            scoped_count += 1
            assert after.cls is superlink.PathScoped
            assert after.kwargs == {"middleware_class": before.cls, "prefix": expected[before.cls], **before.kwargs}
        else:
            assert after is before  # the error translator and the protobuf translation: every request's
    assert scoped_count == 6
    named = {entry.kwargs["middleware_class"].__name__: entry.kwargs["prefix"] for entry in out
             if entry.cls is superlink.PathScoped}
    assert named == {"ControlSensitiveResponseMiddleware": "/v1/control/",
                     "ControlAuthenticationMiddleware": "/v1/control/", "ControlLicenseMiddleware": "/v1/control/",
                     "ControlEventLogMiddleware": "/v1/control/", "NodeAuthMiddleware": "/v1/fleet/",
                     "FleetEventLogMiddleware": "/v1/fleet/"}


def test_an_entry_not_as_flower_reads_it_is_left_unscoped():
    control = importlib.import_module(superlink.CONTROL_MIDDLEWARE)

    async def dispatch(request, call_next):
        return await call_next(request)

    own = Middleware(control.ControlAuthenticationMiddleware, dispatch=dispatch)
    plain = Middleware(control.ControlAuthenticationMiddleware)
    assert superlink.scoped([own]) == [own] and superlink.scoped([plain])[0].cls is superlink.PathScoped


def test_a_changed_control_path_test_or_an_unreadable_flower_is_a_problem_not_a_crash(monkeypatch):
    control = importlib.import_module(superlink.CONTROL_MIDDLEWARE)
    monkeypatch.setattr(control, "_is_control_path", lambda path: path.startswith("/v2/control/"))
    problems = superlink.middleware_problems()
    assert any("_is_control_path is not the one read" in p for p in problems)
    assert any("answers for /v1/control/ alone" in p for p in problems)
    monkeypatch.setattr(superlink, "SUPERLINK_APP", "flwr.superlink.no_such_module")
    (problem,) = superlink.middleware_problems()
    assert "could not be read" in problem and "ModuleNotFoundError" in problem


def test_scope_middleware_wraps_flowers_function_once(monkeypatch):
    app_module = importlib.import_module(superlink.SUPERLINK_APP)
    monkeypatch.setattr(app_module, "_get_middleware", app_module._get_middleware)  # restored after the test
    superlink.scope_middleware()
    superlink.scope_middleware()
    classes = [entry.cls for entry in app_module._get_middleware()]
    assert classes.count(superlink.PathScoped) == 6
    assert superlink.flowers(app_module._get_middleware)().__len__() == len(classes)
