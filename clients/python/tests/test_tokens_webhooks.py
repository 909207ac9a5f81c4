"""Scoped tokens and signed webhooks through the client, against a real daemon."""
from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from stasis_client import Client, Forbidden, InvalidArgument, Unauthorized


def test_scoped_tokens_limit_what_a_client_does(client, daemon) -> None:
    sbx = client.create({"backend": "process", "lifecycle": {"on_idle": "nothing"}})
    try:
        viewer = client.tokens.create("viewer", scopes=["read"], ttl_secs=3600)
        assert viewer["scopes"] == ["read"] and viewer["expires_at_ms"] > 0
        kw = {**daemon.connect_kwargs(), "token": viewer["token"]}
        kw.pop("token_file", None)
        with Client(**kw) as ro:
            assert any(s.id == sbx.id for s in ro.list())
            with pytest.raises(Forbidden):
                ro.get(sbx.id).exec(["true"])
            with pytest.raises(Forbidden):
                ro.tokens.create("x")
        rotated = client.tokens.rotate(viewer["id"], overlap_secs=0)
        assert rotated["rotated_from"] == viewer["id"]
        kw["token"] = viewer["token"]
        with Client(**kw) as old, pytest.raises(Unauthorized):
            old.list()
        with pytest.raises(InvalidArgument):
            client.tokens.create("bad", scopes=["root"])
        listed = {t["id"]: t for t in client.tokens.list()}
        assert listed[rotated["id"]]["scopes"] == ["read"]
        client.tokens.revoke(rotated["id"])
    finally:
        sbx.destroy()


def test_webhooks_deliver_signed_events(client) -> None:
    got: list[tuple[str, bytes]] = []

    class H(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers["content-length"]))
            got.append((self.headers["stasis-signature"], body))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *a) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with pytest.raises(Forbidden):
            client.webhooks.create("http://10.1.2.3/hook")
        hook = client.webhooks.create(
            f"http://127.0.0.1:{srv.server_address[1]}/hook", events=["sandbox.created"]
        )
        secret = hook["secret"].encode()
        sbx = client.create({"backend": "process", "lifecycle": {"on_idle": "nothing"}})
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            time.sleep(0.05)
        sbx.destroy()
        assert got, "no event delivered"
        sig, body = got[0]
        parts = dict(p.split("=", 1) for p in sig.split(","))
        want = hmac.new(secret, f"{parts['t']}.".encode() + body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(want, parts["v1"])
        event = json.loads(body)
        assert event["type"] == "sandbox.created" and event["target"] == sbx.id
        assert [h["id"] for h in client.webhooks.list()] == [hook["id"]]
        assert client.webhooks.dead_letters(hook["id"]) == []
        client.webhooks.delete(hook["id"])
        assert client.webhooks.list() == []
    finally:
        srv.shutdown()
