"""A local listener that relays HTTP and WebSocket connections to a sandbox
port through the stasis daemon's signed URL (``/p/<token>/``), so a program
that expects a server at ``http://host:port/`` (not under a path prefix)
reaches it. Each connection carries one request (``Connection: close`` is
asked of the daemon) or one WebSocket; its request line gets the signed
URL's path in front, and the rest of the bytes are copied both ways.
No API token is involved: the signed URL is the credential.
"""

from __future__ import annotations

import asyncio
from typing import Optional
from urllib.parse import urlsplit

_HEAD_LIMIT = 64 * 1024
_DROP = {b"host", b"connection", b"keep-alive", b"proxy-connection"}


def rewrite_head(head: bytes, prefix: str, host: str) -> bytes:
    """The request head with ``prefix`` before its target, the daemon's
    ``Host`` and ``Connection: close`` (``upgrade`` for a WebSocket)."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[1].startswith(b"/"):
        raise ValueError("not an origin-form HTTP/1.1 request line")
    target = prefix.rstrip("/").encode() + parts[1]
    out = [b" ".join([parts[0], target, parts[2]])]
    upgrade = False
    for line in lines[1:]:
        if not line:
            continue
        name = line.split(b":", 1)[0].strip().lower()
        if name == b"upgrade":
            upgrade = True
        if name in _DROP:
            continue
        out.append(line)
    out.append(b"Host: " + host.encode())
    out.append(b"Connection: upgrade" if upgrade else b"Connection: close")
    return b"\r\n".join(out) + b"\r\n\r\n"


async def _pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
    try:
        while True:
            data = await r.read(65536)
            if not data:
                break
            w.write(data)
            await w.drain()
        if w.can_write_eof():
            w.write_eof()
    except (ConnectionError, OSError):
        pass


class PortForwarder:
    """Listens on ``127.0.0.1`` and relays to ``url`` (a signed port URL)."""

    def __init__(self, url: str) -> None:
        u = urlsplit(url)
        if u.scheme != "http" or not u.hostname:
            raise ValueError(f"expected an http:// signed port URL, got {url!r}")
        self._daemon = (u.hostname, u.port or 80)
        self._host = u.netloc
        self._prefix = u.path
        self._server: Optional[asyncio.AbstractServer] = None

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._handle, host, port, limit=_HEAD_LIMIT)
        addr = self._server.sockets[0].getsockname()
        return addr[0], addr[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def _handle(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        dw: Optional[asyncio.StreamWriter] = None
        try:
            try:
                head = await cr.readuntil(b"\r\n\r\n")
                head = rewrite_head(head[:-4], self._prefix, self._host)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
                cw.write(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
                return
            try:
                dr, dw = await asyncio.open_connection(*self._daemon)
            except OSError:
                cw.write(b"HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
                return
            dw.write(head)
            await asyncio.gather(_pipe(cr, dw), _pipe(dr, cw))
        finally:
            for w in (dw, cw):
                if w is not None:
                    w.close()
