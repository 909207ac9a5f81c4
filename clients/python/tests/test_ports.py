"""Exposed ports from the Python client: signed URLs, their revocation, and
the Agents SDK provider's ``resolve_exposed_port``, against a real daemon."""

from __future__ import annotations

import time

import httpx
import pytest

from stasis_client import Client, Forbidden, InvalidArgument, PortUnreachable, Sandbox
from stasis_client._port_forward import rewrite_head


def _serve(sbx: Sandbox, port: int) -> None:
    sbx.exec("mkdir -p www && echo hello-port > www/hello.txt")
    sbx.session(["python3", "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", "www"])


def _get_when_up(url: str) -> httpx.Response:
    deadline = time.monotonic() + 60
    while True:
        r = httpx.get(url, timeout=30)
        if r.status_code != 502 or time.monotonic() > deadline:
            return r
        time.sleep(0.2)


def test_signed_urls_open_a_port_until_revoked(client: Client) -> None:
    with client.create() as sbx:
        _serve(sbx, 8000)
        u = sbx.port_url(8000, ttl=60)
        assert u.port == 8000 and u.url.endswith(u.path) and u.path.startswith("/p/")
        assert u.expires_at_ms > time.time() * 1000
        r = _get_when_up(u.url + "hello.txt")
        assert (r.status_code, r.text) == (200, "hello-port\n")
        other = sbx.port_url(8000)
        sbx.revoke_port_urls(8000, u.id)
        r = httpx.get(u.url + "hello.txt", timeout=30)
        assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden"
        assert httpx.get(other.url + "hello.txt", timeout=30).status_code == 200
        sbx.revoke_port_urls(8000)
        assert httpx.get(other.url + "hello.txt", timeout=30).status_code == 403

        with pytest.raises(InvalidArgument):
            sbx.port_url(0)
        with pytest.raises(InvalidArgument):
            sbx.port_url(70000)
        with pytest.raises(InvalidArgument) as e:
            sbx.port_url(8000, ttl=1)
        assert e.value.field == "ttl_secs"
        with pytest.raises(InvalidArgument):
            sbx.revoke_port_urls(8000, "not-an-id")


def test_error_classes_of_ports(client: Client) -> None:
    with client.create() as sbx:
        u = sbx.port_url(9)
        r = httpx.get(u.url, timeout=30)
        assert r.status_code == 502 and r.json()["error"]["code"] == "port_unreachable"
        from stasis_client.errors import error_from_response

        assert isinstance(error_from_response(502, r.json()), PortUnreachable)
        assert isinstance(error_from_response(403, {"error": {"code": "forbidden", "message": "x"}}), Forbidden)
        assert sbx.exec("echo ok").stdout == b"ok\n"


def test_rewrite_head_prefixes_the_target_and_closes() -> None:
    head = b"GET /a?b=1 HTTP/1.1\r\nHost: 127.0.0.1:5\r\nConnection: keep-alive\r\nAccept: */*"
    out = rewrite_head(head, "/p/TOKEN/", "daemon:7070")
    lines = out.split(b"\r\n")
    assert lines[0] == b"GET /p/TOKEN/a?b=1 HTTP/1.1"
    assert b"Host: daemon:7070" in lines and b"Connection: close" in lines
    assert b"Accept: */*" in lines and b"Host: 127.0.0.1:5" not in lines
    assert out.endswith(b"\r\n\r\n")
    ws = rewrite_head(b"GET /ws HTTP/1.1\r\nUpgrade: websocket\r\nConnection: Upgrade", "/p/T/", "d:1")
    assert b"Connection: upgrade" in ws.split(b"\r\n") and b"Upgrade: websocket" in ws.split(b"\r\n")
    with pytest.raises(ValueError):
        rewrite_head(b"GET http://x/ HTTP/1.1", "/p/T/", "d:1")


async def test_agents_sdk_resolves_an_exposed_port(daemon) -> None:
    pytest.importorskip("agents")
    from agents.sandbox.errors import ExposedPortUnavailableError

    from stasis_client.agents_sdk import StasisSandboxClient, StasisSandboxClientOptions

    provider = StasisSandboxClient(**daemon.connect_kwargs())
    opts = StasisSandboxClientOptions(exposed_ports=(8000,), on_delete="destroy")
    session = await provider.create(options=opts)
    await session.start()
    try:
        r = await session.exec("mkdir -p www && echo hello-sdk > www/hello.txt")
        assert r.exit_code == 0
        sbx = await session._inner.stasis_sandbox()
        await sbx.session(["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1", "--directory", "www"])
        ep = await session.resolve_exposed_port(8000)
        assert ep.host == "127.0.0.1" and not ep.tls
        # The same endpoint for the same port.
        assert await session.resolve_exposed_port(8000) == ep
        url = ep.url_for("http") + "hello.txt"
        async with httpx.AsyncClient() as c:
            deadline = time.monotonic() + 60
            while True:
                resp = await c.get(url, timeout=30)
                if resp.status_code != 502 or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
        assert (resp.status_code, resp.text) == (200, "hello-sdk\n")
        # A port not configured is refused by the SDK itself.
        with pytest.raises(ExposedPortUnavailableError):
            await session.resolve_exposed_port(9000)
    finally:
        await provider.delete(session)
    # The relay stopped with the session.
    with pytest.raises(httpx.TransportError):
        httpx.get(url, timeout=5)
