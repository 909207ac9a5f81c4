"""stasis code interpreter: runs code in Jupyter kernels for the E2B
code-interpreter SDKs (Python `e2b_code_interpreter`, JS
`@e2b/code-interpreter`).

It listens on port 49999 inside the sandbox (the port those SDKs call) and
speaks their protocol, written from what the SDKs parse:

    POST   /execute               {code, language?, context_id?, env_vars?}
                                  -> a stream of JSON lines, one per event:
                                     {"type": "stdout"|"stderr", "text", "timestamp"}
                                     {"type": "result", "text", "html", "png", ...,
                                      "is_main_result", "extra"?}
                                     {"type": "error", "name", "value", "traceback"}
                                     {"type": "number_of_executions", "execution_count"}
                                     {"type": "end_of_execution"}
    GET    /contexts              -> [{id, language, cwd}, ...]
    POST   /contexts              {language?, cwd?} -> {id, language, cwd}
    DELETE /contexts/{id}         -> 204
    POST   /contexts/{id}/restart -> 204
    GET    /health                -> {"status": "ok"}

Each context is one kernel (jupyter_client + ipykernel); the default
context of a language is made on first use (Python's at start, so the first
`run_code` does not wait for a kernel). The kernels are ordinary processes
of the sandbox: a stasis pause keeps them (a frozen process, or a microVM's
memory), so variables survive a pause and a resume.

Refusals are HTTP errors with a JSON body {"code": <status>, "message"}: the
SDKs turn 404 into NotFoundException and others into SandboxException.

Only the Python standard library and jupyter_client are needed here; the
kernel (ipykernel) is a separate process.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import select
import socket
import sys
import threading
import time
import uuid
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Dict, List, Optional

PORT = int(os.environ.get("STASIS_CODE_INTERPRETER_PORT", "49999"))
# The kernels' working directory when a context names none: the server's own
# (the sandbox's workdir, /home/user in the image).
DEFAULT_CWD = os.environ.get("STASIS_CODE_INTERPRETER_CWD") or os.getcwd()
KERNEL_START_TIMEOUT = float(os.environ.get("STASIS_CODE_INTERPRETER_KERNEL_TIMEOUT", "120"))
# The kernels each language runs in.
KERNELS = {"python": "python3"}
# Languages the SDKs name, accepted as aliases.
ALIASES = {"python3": "python", "py": "python"}
MAX_BODY = 64 << 20

# Jupyter MIME types -> the result fields the SDKs read; any other MIME type
# is passed through in `extra`.
MIME_FIELDS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "image/png": "png",
    "image/jpeg": "jpeg",
    "application/pdf": "pdf",
    "text/latex": "latex",
    "application/json": "json",
    "application/javascript": "javascript",
}
BASE64_FIELDS = {"png", "jpeg", "pdf"}
# A DataFrame's columns as lists (the SDKs' `data`), from the formatter the
# kernel setup below registers.
DATA_MIME = "application/vnd.stasis.data+json"
MIME_FIELDS[DATA_MIME] = "data"

# Run once in every new kernel (silently, outside its history), so code
# written for E2B's kernels finds what they offer:
# - `pd` names pandas without an import (imported on first use, so a kernel
#   that never touches it does not pay for it);
# - a DataFrame result also carries its columns as lists (`data`);
# - a PIL image's `show()` and `save()` to a file also display it (a PNG result).
KERNEL_SETUP = '''
def _stasis_setup():
    import importlib, json
    from IPython import get_ipython
    from IPython.core.formatters import BaseFormatter
    from traitlets import ObjectName, Unicode

    ip = get_ipython()

    class _LazyModule:
        def __init__(self, module, alias):
            self.__dict__["_m"], self.__dict__["_a"] = module, alias

        def _load(self):
            mod = importlib.import_module(self._m)
            if ip.user_ns.get(self._a) is self:
                ip.user_ns[self._a] = mod
            return mod

        def __getattr__(self, name):
            return getattr(self._load(), name)

        def __repr__(self):
            return repr(self._load())

    ip.user_ns.setdefault("pd", _LazyModule("pandas", "pd"))

    class DataFormatter(BaseFormatter):
        format_type = Unicode("%(mime)s")
        print_method = ObjectName("_repr_stasis_data_")
        _return_type = (dict,)

    def frame_data(df):
        return {str(c): json.loads(df[c].to_json(orient="values", date_format="iso")) for c in df.columns}

    f = DataFormatter(parent=ip.display_formatter)
    # pandas 3 names DataFrame's module `pandas`, older ones `pandas.core.frame`.
    for module in ("pandas", "pandas.core.frame"):
        f.for_type_by_name(module, "DataFrame", frame_data)
    ip.display_formatter.formatters[f.format_type] = f

    try:
        from PIL import Image
    except ImportError:
        return
    from IPython.display import display

    def show(self, *args, **kwargs):
        display(self)

    save = Image.Image.save

    import os

    def save_and_show(self, fp, *args, **kwargs):
        result = save(self, fp, *args, **kwargs)
        # Saved to a file by the user's code; not the PNG rendering of a
        # display (to a buffer), which would display again.
        if isinstance(fp, (str, os.PathLike)):
            display(self)
        return result

    Image.Image.show = show
    Image.Image.save = save_and_show

_stasis_setup()
del _stasis_setup
''' % {"mime": DATA_MIME}


class HttpError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def result_message(data: Dict[str, object], is_main: bool) -> Dict[str, object]:
    """A kernel's display data (MIME type -> value) as a `result` line."""
    out: Dict[str, object] = {"type": "result", "is_main_result": is_main}
    extra: Dict[str, object] = {}
    for mime, value in data.items():
        field = MIME_FIELDS.get(mime)
        if field is None:
            extra[mime] = value
            continue
        if field in BASE64_FIELDS and isinstance(value, str):
            value = value.replace("\n", "")
        if field == "text" and isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            # A string's repr shows as the string itself, as E2B's
            # interpreter does: `os.getenv("HOME")` gives /root, not '/root'.
            value = value[1:-1]
        if field == "json" and isinstance(value, str):
            # Some kernels send JSON as text; the SDKs expect an object.
            try:
                value = json.loads(value)
            except ValueError:
                pass
        out[field] = value
    if extra:
        out["extra"] = extra
    return out


def error_message(content: Dict[str, object]) -> Dict[str, object]:
    tb = content.get("traceback") or []
    return {
        "type": "error",
        "name": content.get("ename", ""),
        "value": content.get("evalue", ""),
        "traceback": "\n".join(tb) if isinstance(tb, list) else str(tb),
    }


def normalize_language(language: Optional[str]) -> str:
    lang = (language or "python").strip().lower()
    lang = ALIASES.get(lang, lang)
    if lang not in KERNELS:
        raise HttpError(
            400,
            f"language {language!r} is not supported by this code interpreter "
            f"(supported: {', '.join(sorted(KERNELS))})",
        )
    return lang


class Context:
    """One kernel, run one execution at a time."""

    def __init__(self, language: str, cwd: str, ctx_id: Optional[str] = None):
        self.id = ctx_id or str(uuid.uuid4())
        self.language = language
        self.cwd = cwd
        self.lock = threading.Lock()
        self.km = None
        self.seq = 0  # its place in the listing (Contexts.create)
        self.kc = None

    def describe(self) -> Dict[str, str]:
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def start(self) -> None:
        # Imported here, not at the top: the server listens first (a
        # microVM under TCG takes seconds over this import), and requests
        # wait for the kernel instead of finding no listener.
        from jupyter_client.manager import KernelManager

        km = KernelManager(kernel_name=KERNELS[self.language])
        km.start_kernel(cwd=self.cwd, env=dict(os.environ))
        kc = km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=KERNEL_START_TIMEOUT)
        except Exception:
            kc.stop_channels()
            km.shutdown_kernel(now=True)
            raise
        self.km, self.kc = km, kc
        self._silent(KERNEL_SETUP)

    def shutdown(self) -> None:
        if self.kc is not None:
            self.kc.stop_channels()
        if self.km is not None:
            try:
                self.km.shutdown_kernel(now=True)
            except Exception:
                pass
        self.km = self.kc = None

    def restart(self) -> None:
        with self.lock:
            self.shutdown()
            self.start()

    # -- execution ---------------------------------------------------------

    def _silent(self, code: str) -> None:
        """Run bookkeeping code in the kernel (no history, no output)."""
        msg_id = self.kc.execute(code, silent=True, store_history=False)
        self._wait_reply(msg_id)

    def _wait_reply(self, msg_id: str) -> Dict[str, object]:
        while True:
            reply = self.kc.get_shell_msg(timeout=KERNEL_START_TIMEOUT)
            if reply.get("parent_header", {}).get("msg_id") == msg_id:
                return reply

    def execute(
        self,
        code: str,
        env_vars: Dict[str, str],
        emit: Callable[[Dict[str, object]], None],
        gone: Callable[[], bool],
    ) -> None:
        """Run `code`, calling `emit` for each event in order. `gone` says
        whether the caller went away (the execution is then interrupted)."""
        with self.lock:
            if self.km is None or not self.km.is_alive():
                self.shutdown()
                self.start()
            if env_vars:
                self._silent(
                    "import os as _stasis_os\n"
                    f"_stasis_env = {json.dumps(env_vars)}\n"
                    "_stasis_saved = {k: _stasis_os.environ.get(k) for k in _stasis_env}\n"
                    "_stasis_os.environ.update(_stasis_env)\n"
                    "del _stasis_env"
                )
            try:
                self._run(code, emit, gone)
            finally:
                if env_vars and self.km is not None and self.km.is_alive():
                    self._silent(
                        "for _k, _v in _stasis_saved.items():\n"
                        "    if _v is None:\n"
                        "        _stasis_os.environ.pop(_k, None)\n"
                        "    else:\n"
                        "        _stasis_os.environ[_k] = _v\n"
                        "del _stasis_saved, _k, _v"
                    )

    def _run(self, code, emit, gone) -> None:
        msg_id = self.kc.execute(code, store_history=True, allow_stdin=False, stop_on_error=True)
        count: Optional[int] = None
        interrupted = False
        while True:
            if not interrupted and gone():
                # The caller stopped waiting (its timeout, a cancel): stop the
                # code rather than let it run on unseen.
                self.km.interrupt_kernel()
                interrupted = True
            try:
                msg = self.kc.get_iopub_msg(timeout=0.2)
            except queue.Empty:
                if not self.km.is_alive():
                    emit(
                        {
                            "type": "error",
                            "name": "KernelDied",
                            "value": "the kernel exited while running the code; "
                            "its state is lost and it will be started anew",
                            "traceback": "",
                        }
                    )
                    break
                continue
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = msg["msg_type"]
            content = msg["content"]
            if kind == "stream":
                name = "stderr" if content.get("name") == "stderr" else "stdout"
                emit({"type": name, "text": content.get("text", ""), "timestamp": time.time_ns()})
            elif kind == "execute_input":
                count = content.get("execution_count", count)
            elif kind == "execute_result":
                emit(result_message(content.get("data", {}), True))
            elif kind in ("display_data", "update_display_data"):
                emit(result_message(content.get("data", {}), False))
            elif kind == "error":
                emit(error_message(content))
            elif kind == "status" and content.get("execution_state") == "idle":
                break
        if self.km.is_alive():
            reply = self._wait_reply(msg_id)
            count = reply.get("content", {}).get("execution_count", count)
        if count is not None:
            emit({"type": "number_of_executions", "execution_count": count})
        emit({"type": "end_of_execution"})


class Contexts:
    def __init__(self, default_cwd: str):
        self.default_cwd = default_cwd
        self.lock = threading.Lock()
        self.by_id: Dict[str, Context] = {}
        # language -> id of its default context
        self.defaults: Dict[str, str] = {}
        self.starting: Dict[str, threading.Event] = {}
        # Contexts are listed in the order they were asked for, not the order
        # their kernels came up: the default one warmed at start stays first
        # even when a caller's context starts faster.
        self.order = itertools.count()

    def list(self) -> List[Dict[str, str]]:
        with self.lock:
            ordered = sorted(self.by_id.values(), key=lambda c: c.seq)
            return [c.describe() for c in ordered]

    def get(self, ctx_id: str) -> Context:
        with self.lock:
            c = self.by_id.get(ctx_id)
        if c is None:
            raise HttpError(404, f"context {ctx_id!r} not found")
        return c

    def create(self, language: Optional[str], cwd: Optional[str]) -> Context:
        lang = normalize_language(language)
        cwd = cwd or self.default_cwd
        if not os.path.isabs(cwd):
            raise HttpError(400, f"cwd {cwd!r} must be an absolute path")
        os.makedirs(cwd, exist_ok=True)
        c = Context(lang, cwd)
        with self.lock:
            c.seq = next(self.order)
        try:
            c.start()
        except Exception as e:
            raise HttpError(500, f"the {lang} kernel did not start: {e}")
        with self.lock:
            self.by_id[c.id] = c
        return c

    def default(self, language: Optional[str]) -> Context:
        """The language's default context, started once; concurrent callers
        wait for the one start."""
        lang = normalize_language(language)
        while True:
            with self.lock:
                cid = self.defaults.get(lang)
                if cid in self.by_id:
                    return self.by_id[cid]
                ev = self.starting.get(lang)
                if ev is None:
                    ev = self.starting[lang] = threading.Event()
                    mine = True
                else:
                    mine = False
            if not mine:
                ev.wait()
                continue
            try:
                c = self.create(lang, None)
                with self.lock:
                    self.defaults[lang] = c.id
                return c
            finally:
                with self.lock:
                    del self.starting[lang]
                ev.set()

    def remove(self, ctx_id: str) -> None:
        with self.lock:
            c = self.by_id.pop(ctx_id, None)
        if c is None:
            raise HttpError(404, f"context {ctx_id!r} not found")
        with c.lock:
            c.shutdown()

    def shutdown(self) -> None:
        with self.lock:
            all_ = list(self.by_id.values())
            self.by_id.clear()
        for c in all_:
            c.shutdown()


def client_gone(sock: socket.socket) -> bool:
    """Whether the peer closed its side (readable with nothing to read)."""
    try:
        r, _, _ = select.select([sock], [], [], 0)
        if not r:
            return False
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "stasis-code-interpreter"
    contexts: Contexts  # set by make_server

    def log_message(self, fmt, *args):  # quiet: one line per request on stderr
        sys.stderr.write("%s %s\n" % (self.command, self.path))

    # -- helpers -----------------------------------------------------------

    def _body(self) -> Dict[str, object]:
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise HttpError(413, f"request body over {MAX_BODY} bytes")
        raw = self.rfile.read(n) if n else b""
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except ValueError as e:
            raise HttpError(400, f"the body is not JSON: {e}")
        if not isinstance(body, dict):
            raise HttpError(400, "the body must be a JSON object")
        return body

    def _json(self, status: int, value) -> None:
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _empty(self, status: int = 204) -> None:
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _error(self, e: HttpError) -> None:
        self._json(e.status, {"code": e.status, "message": e.message})

    def _dispatch(self, routes) -> None:
        path = self.path.split("?", 1)[0].rstrip("/") or "/"
        parts = [p for p in path.split("/") if p]
        try:
            for match, fn in routes:
                args = match(parts)
                if args is not None:
                    fn(*args)
                    return
            raise HttpError(404, f"no route {self.command} {path}")
        except HttpError as e:
            self._error(e)
        except Exception as e:  # the caller still gets an answer
            self._error(HttpError(500, f"{type(e).__name__}: {e}"))

    # -- routes ------------------------------------------------------------

    def do_GET(self):
        self._dispatch(
            [
                (lambda p: () if p == ["health"] else None, lambda: self._json(200, {"status": "ok"})),
                (lambda p: () if p == ["contexts"] else None, lambda: self._json(200, self.contexts.list())),
            ]
        )

    def do_POST(self):
        self._dispatch(
            [
                (lambda p: () if p == ["execute"] else None, self.execute),
                (lambda p: () if p == ["contexts"] else None, self.create_context),
                (
                    lambda p: (p[1],) if len(p) == 3 and p[0] == "contexts" and p[2] == "restart" else None,
                    self.restart_context,
                ),
            ]
        )

    def do_DELETE(self):
        self._dispatch(
            [(lambda p: (p[1],) if len(p) == 2 and p[0] == "contexts" else None, self.remove_context)]
        )

    def create_context(self):
        body = self._body()
        language, cwd = body.get("language"), body.get("cwd")
        for k, v in (("language", language), ("cwd", cwd)):
            if v is not None and not isinstance(v, str):
                raise HttpError(400, f"{k} must be a string")
        self._json(200, self.contexts.create(language, cwd).describe())

    def restart_context(self, ctx_id):
        c = self.contexts.get(ctx_id)
        try:
            c.restart()
        except Exception as e:
            raise HttpError(500, f"the kernel did not restart: {e}")
        self._empty()

    def remove_context(self, ctx_id):
        self.contexts.remove(ctx_id)
        self._empty()

    def execute(self):
        body = self._body()
        code = body.get("code")
        if not isinstance(code, str):
            raise HttpError(400, "code must be a string")
        ctx_id, language = body.get("context_id"), body.get("language")
        if ctx_id and language:
            raise HttpError(400, "give context_id or language, not both")
        env_vars = body.get("env_vars") or {}
        if not isinstance(env_vars, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items()
        ):
            raise HttpError(400, "env_vars must be an object of strings")
        ctx = self.contexts.get(ctx_id) if ctx_id else self.contexts.default(language)

        # From here on the answer is a stream: errors of the code are events.
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        broken = False

        def emit(event):
            nonlocal broken
            if broken:
                return
            line = (json.dumps(event) + "\n").encode()
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            except OSError:
                broken = True

        ctx.execute(code, env_vars, emit, lambda: broken or client_gone(self.connection))
        if not broken:
            try:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                pass
        self.close_connection = True


def make_server(host: str, port: int, contexts: Contexts) -> ThreadingHTTPServer:
    handler = type("BoundHandler", (Handler,), {"contexts": contexts})
    srv = ThreadingHTTPServer((host, port), handler)
    srv.daemon_threads = True
    return srv


def main() -> None:
    contexts = Contexts(DEFAULT_CWD)
    srv = make_server("0.0.0.0", PORT, contexts)
    # Start Python's kernel now, so the first run_code finds it warm (and a
    # template or paused sandbox keeps it started).
    threading.Thread(target=contexts.default, args=("python",), daemon=True).start()
    sys.stderr.write(f"stasis code interpreter on :{PORT}, cwd {DEFAULT_CWD}\n")
    try:
        srv.serve_forever()
    finally:
        contexts.shutdown()


if __name__ == "__main__":
    main()
