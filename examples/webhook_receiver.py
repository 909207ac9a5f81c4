#!/usr/bin/env python3
"""A stasis webhook receiver that checks what it gets (standard library only).

    STASIS_WEBHOOK_SECRET=whsec_... python3 webhook_receiver.py --port 8080

For every POST it:
  1. recomputes HMAC-SHA256(secret, "<t>.<raw body>") and compares it in
     constant time with `v1` of the `Stasis-Signature: t=...,v1=...` header
     (401 if it does not match: forged, or another endpoint's secret);
  2. refuses a timestamp more than --tolerance seconds (default 300) away
     from now (401: a captured request replayed later);
  3. handles each event id once: stasis delivers at least once, so a
     redelivery of an event already handled is acknowledged (200) and skipped.
Each handled event is printed as one JSON line on stdout.
"""
from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SEEN: set[str] = set()


def verify(secret: bytes, header: str, body: bytes, now: float, tolerance: int) -> bool:
    parts = dict(p.split("=", 1) for p in header.split(",") if "=" in p)
    try:
        t = int(parts["t"])
        given = parts["v1"]
    except (KeyError, ValueError):
        return False
    if abs(now - t) > tolerance:
        return False
    want = hmac.new(secret, f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(want, given)


def handler(secret: bytes, tolerance: int):
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            sig = self.headers.get("stasis-signature", "")
            if not verify(secret, sig, body, time.time(), tolerance):
                self.send_response(401)
                self.end_headers()
                self.wfile.write(b"bad signature or timestamp\n")
                return
            event = json.loads(body)
            duplicate = event["id"] in SEEN
            SEEN.add(event["id"])
            if not duplicate:
                print(json.dumps(event), flush=True)
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"duplicate\n" if duplicate else b"ok\n")

        def log_message(self, *args) -> None:  # keep stdout for events
            pass

    return Handler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--port-file", help="write the bound port here (use with --port 0)")
    ap.add_argument("--tolerance", type=int, default=300)
    a = ap.parse_args()
    secret = os.environ.get("STASIS_WEBHOOK_SECRET")
    if not secret:
        sys.exit("set STASIS_WEBHOOK_SECRET to the endpoint's secret")
    srv = ThreadingHTTPServer(("127.0.0.1", a.port), handler(secret.encode(), a.tolerance))
    if a.port_file:
        with open(a.port_file + ".tmp", "w") as f:
            f.write(str(srv.server_address[1]))
        os.replace(a.port_file + ".tmp", a.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
