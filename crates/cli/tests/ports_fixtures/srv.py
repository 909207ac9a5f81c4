# A test server run inside a sandbox: GET /headers answers the request's
# headers as JSON, POST /echo answers its body, GET /ws with an upgrade is a
# WebSocket echo (RFC 6455, text and binary frames, close), GET /setcookie
# sets cookies (the daemon's names among them). Stdlib only.
import base64
import hashlib
import http.server
import json
import struct
import sys

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


def read_frame(f):
    h = f.read(2)
    if len(h) < 2:
        return None, None
    op = h[0] & 0x0F
    n = h[1] & 0x7F
    if n == 126:
        n = struct.unpack(">H", f.read(2))[0]
    elif n == 127:
        n = struct.unpack(">Q", f.read(8))[0]
    mask = f.read(4) if h[1] & 0x80 else b"\0\0\0\0"
    data = bytearray(f.read(n))
    for i in range(len(data)):
        data[i] ^= mask[i % 4]
    return op, bytes(data)


def write_frame(f, op, data):
    n = len(data)
    if n < 126:
        head = struct.pack(">BB", 0x80 | op, n)
    elif n < 65536:
        head = struct.pack(">BBH", 0x80 | op, 126, n)
    else:
        head = struct.pack(">BBQ", 0x80 | op, 127, n)
    f.write(head + data)
    f.flush()


class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def answer(self, status, body, ctype="application/json"):
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path.startswith("/ws") and self.headers.get("upgrade", "").lower() == "websocket":
            key = self.headers["sec-websocket-key"].encode()
            accept = base64.b64encode(hashlib.sha1(key + GUID).digest()).decode()
            self.send_response(101)
            self.send_header("upgrade", "websocket")
            self.send_header("connection", "Upgrade")
            self.send_header("sec-websocket-accept", accept)
            self.end_headers()
            self.wfile.flush()
            while True:
                op, data = read_frame(self.rfile)
                if op is None or op == 8:
                    if op == 8:
                        write_frame(self.wfile, 8, b"")
                    break
                write_frame(self.wfile, op, data)
            self.close_connection = True
            return
        if self.path.startswith("/setcookie"):
            self.send_response(200)
            for c in ["stasis_session=scs_planted; Path=/", "__Host-stasis_session=scs_x; Path=/; Secure",
                      "stasis_port=planted; Path=/", "app=1; Path=/"]:
                self.send_header("set-cookie", c)
            self.send_header("content-length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
            return
        if self.path.startswith("/headers"):
            h = {k.lower(): v for k, v in self.headers.items()}
            h[":path"] = self.path
            self.answer(200, json.dumps(h).encode())
            return
        self.answer(404, b"no such page here", "text/plain")

    def do_POST(self):
        n = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(n)
        self.answer(200, body, "application/octet-stream")


http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
