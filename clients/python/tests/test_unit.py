"""Client behaviour that needs no daemon: auth header, error mapping, NDJSON decoding."""

from __future__ import annotations

import json

import httpx
import pytest

from stasis_client import (
    Client,
    IncompatibleSnapshot,
    InvalidArgument,
    NotFound,
    Overloaded,
    RateLimited,
    StasisError,
    Unauthorized,
)
from stasis_client import _core
from stasis_client.errors import error_from_response


def _recording_client(seen: list, **kw) -> Client:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"ok": True})

    return Client("http://stasis.invalid", transport=httpx.MockTransport(handler), **kw)


def test_token_precedence(tmp_path, monkeypatch) -> None:
    f = tmp_path / "token"
    f.write_text("from-file\n")
    monkeypatch.delenv("STASIS_TOKEN", raising=False)
    monkeypatch.delenv("STASIS_TOKEN_FILE", raising=False)

    seen: list = []
    _recording_client(seen, token_file=f).health()
    assert seen[-1].headers["authorization"] == "Bearer from-file"

    monkeypatch.setenv("STASIS_TOKEN", "from-env")
    _recording_client(seen, token_file=f).health()
    assert seen[-1].headers["authorization"] == "Bearer from-env"

    _recording_client(seen, token="explicit").health()
    assert seen[-1].headers["authorization"] == "Bearer explicit"

    monkeypatch.delenv("STASIS_TOKEN")
    monkeypatch.setenv("STASIS_TOKEN_FILE", str(f))
    _recording_client(seen).health()
    assert seen[-1].headers["authorization"] == "Bearer from-file"

    monkeypatch.delenv("STASIS_TOKEN_FILE")
    _recording_client(seen).health()
    assert "authorization" not in seen[-1].headers

    with pytest.raises(InvalidArgument):
        Client("http://x", token_file=tmp_path / "missing")
    (tmp_path / "empty").write_text("")
    with pytest.raises(InvalidArgument):
        Client("http://x", token_file=tmp_path / "empty")


def test_error_mapping() -> None:
    e = error_from_response(404, {"error": {"code": "not_found", "message": "gone"}})
    assert isinstance(e, NotFound) and str(e) == "not_found: gone"
    e = error_from_response(401, {"error": {"code": "unauthorized", "message": "no"}})
    assert isinstance(e, Unauthorized)
    # A code this client does not know yet falls back on the status.
    e = error_from_response(429, {"error": {"code": "slow_down", "message": "x"}})
    assert isinstance(e, RateLimited) and e.code == "slow_down"
    # A sandbox's full request queue is a kind of 429: code that catches
    # RateLimited keeps working.
    e = error_from_response(429, {"error": {"code": "overloaded", "message": "x"}})
    assert isinstance(e, Overloaded) and isinstance(e, RateLimited)
    e = error_from_response(422, {"error": {"code": "incompatible_snapshot", "message": "qemu"}})
    assert isinstance(e, IncompatibleSnapshot) and e.status == 422
    e = error_from_response(502, None, "<html>bad gateway</html>")
    assert isinstance(e, StasisError) and e.status == 502
    e = error_from_response(400, {"error": {"code": "invalid_manifest", "message": "m", "field": "resources.cpus"}})
    assert e.field == "resources.cpus" and "resources.cpus" in str(e)


def test_api_error_raised_from_answer() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(409, json={"error": {"code": "busy", "message": "in progress"}})

    c = Client("http://stasis.invalid", transport=httpx.MockTransport(handler))
    from stasis_client import Busy, InvalidState

    with pytest.raises(Busy) as e:
        c.get("sb-1")
    assert isinstance(e.value, InvalidState)


def test_ndjson_decoder_handles_split_lines() -> None:
    lines = [
        {"type": "output", "stream": "stdout", "data": "ab", "data_b64": "YWI="},
        {"type": "exit", "exit_code": 0, "signal": None, "timed_out": False, "truncated": False, "duration_ms": 5},
    ]
    raw = b"".join(json.dumps(l).encode() + b"\n" for l in lines)
    dec = _core.LineDecoder()
    got = []
    for i in range(0, len(raw), 7):
        got += dec.feed(raw[i : i + 7])
    got += dec.finish()
    assert got == lines
    out: list = []
    err: list = []
    assert _core.stream_line(got[0], out, err) == ("stdout", b"ab")
    res = _core.stream_line(got[1], out, err)
    assert res.exit_code == 0 and res.stdout == b"ab"
    with pytest.raises(NotFound):
        _core.stream_line({"type": "error", "code": "not_found", "message": "x"}, out, err)


def test_connection_failure_is_clear() -> None:
    from stasis_client import ConnectionFailed

    c = Client("http://127.0.0.1:9", timeout=2)
    with pytest.raises(ConnectionFailed) as e:
        c.health()
    assert "cannot reach the stasis daemon" in str(e.value)


def test_network_methods_send_the_policy() -> None:
    seen: list = []
    status = {"policy": {"allow": ["pypi.org"], "deny": []}, "attached": True, "counters": None}

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/v1/sandboxes/sb-1":
            return httpx.Response(200, json={"id": "sb-1", "state": "running", "backend": "process"})
        if request.method == "PATCH" and b"*.com" in request.content:
            return httpx.Response(
                400,
                json={"error": {"code": "invalid_manifest", "field": "network.allow[0]",
                                "message": "network.allow[0]: too wide"}},
            )
        return httpx.Response(200, json=status)

    from stasis_client import InvalidManifest

    c = Client("http://stasis.invalid", transport=httpx.MockTransport(handler))
    sbx = c.get("sb-1")
    assert sbx.network()["policy"]["allow"] == ["pypi.org"]
    assert (seen[-1].method, seen[-1].url.path) == ("GET", "/v1/sandboxes/sb-1/network")
    sbx.set_network(allow=["pypi.org", "*.pythonhosted.org"], deny=["evil.pythonhosted.org"])
    assert (seen[-1].method, seen[-1].url.path) == ("PATCH", "/v1/sandboxes/sb-1/network")
    assert json.loads(seen[-1].content) == {
        "allow": ["pypi.org", "*.pythonhosted.org"],
        "deny": ["evil.pythonhosted.org"],
    }
    sbx.set_network()
    assert json.loads(seen[-1].content) == {"allow": [], "deny": []}
    with pytest.raises(InvalidManifest) as e:
        sbx.set_network(allow=["*.com"])
    assert e.value.field == "network.allow[0]"
    with pytest.raises(TypeError):
        sbx.set_network(allow="pypi.org")
