"""Transport-independent core shared by the sync and the async client.

Each API operation is written once, as a generator that yields :class:`Req`
objects and receives :class:`Resp` objects; the sync client drives it with an
``httpx.Client``, the async client with an ``httpx.AsyncClient``. So both
clients build the same requests and parse the same answers.
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional, TypeVar, Union
from urllib.parse import quote

from . import contract
from .errors import CodeError, InvalidArgument, StasisError, error_from_response
from .models import (
    CallOutcome,
    ExecResult,
    FileEntry,
    FileEvent,
    FileStat,
    PortUrl,
    ResumeReport,
    SandboxInfo,
    SandboxPage,
    SessionInfo,
    SessionOutput,
    SnapshotInfo,
    TemplateInfo,
)

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:7070"


def resolve_token(token: Optional[str] = None, token_file: Union[str, Path, None] = None) -> Optional[str]:
    """The API token: ``token``, else ``$STASIS_TOKEN``, else the contents of
    ``token_file`` or ``$STASIS_TOKEN_FILE``; None when none is given."""
    if token:
        return token.strip()
    env = os.environ.get("STASIS_TOKEN")
    if env:
        return env.strip()
    path = token_file or os.environ.get("STASIS_TOKEN_FILE")
    if path:
        try:
            text = Path(path).read_text().strip()
        except OSError as e:
            raise InvalidArgument(f"cannot read the token file {path}: {e}") from e
        if not text:
            raise InvalidArgument(f"the token file {path} is empty")
        return text
    return None


@dataclass
class Config:
    base_url: str
    token: Optional[str]
    actor: Optional[str]
    timeout: float

    @classmethod
    def make(
        cls,
        base_url: Optional[str],
        token: Optional[str],
        token_file: Union[str, Path, None],
        actor: Optional[str],
        timeout: float,
    ) -> "Config":
        url = (base_url or os.environ.get("STASIS_URL") or DEFAULT_URL).rstrip("/")
        return cls(
            base_url=url,
            token=resolve_token(token, token_file),
            actor=actor or os.environ.get("STASIS_ACTOR"),
            timeout=timeout,
        )

    def headers(self) -> dict[str, str]:
        h = {"user-agent": "stasis-client-python/0.1"}
        if self.token:
            h["authorization"] = f"Bearer {self.token}"
        if self.actor:
            h["x-stasis-actor"] = self.actor
        return h


@dataclass
class Req:
    route: str
    method: str
    path: str
    ok: tuple[int, ...]
    params: dict[str, Any] = field(default_factory=dict)
    json: Any = None
    content: Optional[bytes] = None
    # Extra seconds on top of the client timeout (long polls, long commands).
    extra_timeout: float = 0.0


@dataclass
class Resp:
    status: int
    content: bytes
    headers: Mapping[str, str] = field(default_factory=dict)

    def json(self) -> Any:
        return json.loads(self.content) if self.content else None


def req(route: str, *, ids: Mapping[str, str] = {}, **kw: Any) -> Req:
    r = contract.ROUTES[route]
    path = r.path
    for k, v in ids.items():
        path = path.replace("{" + k + "}", quote(str(v), safe=""))
    return Req(route=route, method=r.method.upper(), path=path, ok=r.ok, **kw)


def check(r: Req, status: int, content: bytes) -> None:
    if status in r.ok:
        return
    try:
        body = json.loads(content) if content else None
    except ValueError:
        body = None
    raise error_from_response(status, body, content.decode("utf-8", "replace"))


Op = Generator[Req, Resp, T]

Argv = Union[str, Sequence[str]]


def argv_of(cmd: Argv) -> list[str]:
    """A string runs through ``sh -c``; a sequence is the argv itself."""
    if isinstance(cmd, str):
        return ["sh", "-c", cmd]
    argv = [str(a) for a in cmd]
    if not argv:
        raise InvalidArgument("empty command")
    return argv


def exec_body(
    cmd: Argv,
    env: Optional[Mapping[str, str]],
    cwd: Optional[str],
    timeout: Optional[float],
    stdin: Union[str, bytes, None],
) -> dict[str, Any]:
    body: dict[str, Any] = {"argv": argv_of(cmd)}
    if env:
        body["env"] = dict(env)
    if cwd is not None:
        body["cwd"] = cwd
    if timeout is not None:
        body["timeout_ms"] = max(1, int(timeout * 1000))
    if stdin is not None:
        data = stdin.encode() if isinstance(stdin, str) else bytes(stdin)
        body["stdin_b64"] = base64.b64encode(data).decode()
    return body


def exec_extra_timeout(timeout: Optional[float]) -> float:
    # The server's default command timeout is 60 s; the HTTP request must outlive it.
    return (timeout if timeout is not None else 60.0) + 30.0


# ----- sandboxes ---------------------------------------------------------------


def op_create(
    manifest: Optional[Mapping[str, Any]],
    template: Optional[str] = None,
    labels: Optional[Mapping[str, str]] = None,
) -> Op[SandboxInfo]:
    body: dict[str, Any] = {"manifest": dict(manifest)} if manifest is not None else {}
    if template is not None:
        body["template"] = template
    if labels:
        body["labels"] = {str(k): str(v) for k, v in labels.items()}
    resp = yield req("sandbox.create", json=body, extra_timeout=300)
    return SandboxInfo.from_json(resp.json())


def op_get(sandbox_id: str) -> Op[SandboxInfo]:
    resp = yield req("sandbox.get", ids={"id": sandbox_id})
    return SandboxInfo.from_json(resp.json())


def op_list(state: Optional[str]) -> Op[list[SandboxInfo]]:
    params = {"state": state} if state else {}
    resp = yield req("sandbox.list", params=params)
    return [SandboxInfo.from_json(d) for d in resp.json()]


def _ms(t: Any) -> int:
    """Milliseconds since the epoch of an int (already ms), a float (seconds)
    or a datetime (naive = UTC)."""
    import datetime as _dt

    if isinstance(t, bool):
        raise InvalidArgument("created_after: expected a datetime or milliseconds")
    if isinstance(t, int):
        return t
    if isinstance(t, float):
        return int(t * 1000)
    if isinstance(t, _dt.datetime):
        if t.tzinfo is None:
            t = t.replace(tzinfo=_dt.timezone.utc)
        return int(t.timestamp() * 1000)
    raise InvalidArgument("created_after: expected a datetime or milliseconds")


def op_list_page(
    state: Optional[str] = None,
    labels: Optional[Mapping[str, str]] = None,
    created_after: Any = None,
    limit: Optional[int] = None,
    cursor: Optional[str] = None,
) -> Op[SandboxPage]:
    params: dict[str, Any] = {}
    if state:
        params["state"] = state
    if labels:
        for k, v in labels.items():
            if "," in str(k) or "," in str(v) or "=" in str(k):
                raise InvalidArgument(f"label filter {k!r}={v!r}: ',' and a key's '=' cannot be filtered on")
        params["label"] = ",".join(f"{k}={v}" for k, v in labels.items())
    if created_after is not None:
        params["created_after"] = _ms(created_after)
    if limit is not None:
        params["limit"] = int(limit)
    if cursor:
        params["cursor"] = cursor
    resp = yield req("sandbox.list", params=params)
    return SandboxPage(
        [SandboxInfo.from_json(d) for d in resp.json()],
        resp.headers.get("x-next-cursor") or None,
    )


def op_set_lifecycle(sandbox_id: str, change: Mapping[str, Any]) -> Op[SandboxInfo]:
    body = {k: v for k, v in change.items() if v is not None}
    resp = yield req("sandbox.lifecycle", ids={"id": sandbox_id}, json=body)
    return SandboxInfo.from_json(resp.json())


def op_destroy(sandbox_id: str) -> Op[SandboxInfo]:
    resp = yield req("sandbox.destroy", ids={"id": sandbox_id}, extra_timeout=60)
    return SandboxInfo.from_json(resp.json())


def op_exec(sandbox_id: str, body: dict[str, Any], timeout: Optional[float]) -> Op[ExecResult]:
    resp = yield req(
        "sandbox.exec",
        ids={"id": sandbox_id},
        json=body,
        extra_timeout=exec_extra_timeout(timeout),
    )
    return ExecResult.from_json(resp.json())


def op_pause(sandbox_id: str, keep_memory: Optional[bool]) -> Op[SandboxInfo]:
    body = {} if keep_memory is None else {"keep_memory": keep_memory}
    resp = yield req("sandbox.pause", ids={"id": sandbox_id}, json=body, extra_timeout=120)
    return SandboxInfo.from_json(resp.json())


def op_resume(sandbox_id: str) -> Op[SandboxInfo]:
    resp = yield req("sandbox.resume", ids={"id": sandbox_id}, extra_timeout=120)
    return SandboxInfo.from_json(resp.json())


def op_snapshot(sandbox_id: str, ttl_secs: Optional[int]) -> Op[SnapshotInfo]:
    body = {} if ttl_secs is None else {"ttl_secs": int(ttl_secs)}
    resp = yield req("sandbox.snapshot", ids={"id": sandbox_id}, json=body, extra_timeout=300)
    return SnapshotInfo.from_json(resp.json())


def _check_port(port: int) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise InvalidArgument(f"port must be an integer 1-65535 (got {port!r})")
    return port


def op_port_url(base_url: str, sandbox_id: str, port: int, ttl_secs: Optional[int]) -> Op[PortUrl]:
    port = _check_port(port)
    body = {} if ttl_secs is None else {"ttl_secs": int(ttl_secs)}
    resp = yield req("port.url", ids={"id": sandbox_id, "port": str(port)}, json=body)
    return PortUrl.from_json(resp.json(), base_url)


def op_port_revoke(sandbox_id: str, port: int, url_id: Optional[str]) -> Op[None]:
    port = _check_port(port)
    ids = {"id": sandbox_id, "port": str(port)}
    if url_id is None:
        yield req("port.revoke_all", ids=ids)
    else:
        yield req("port.revoke", ids={**ids, "url_id": url_id})
    return None


def op_fork(sandbox_id: str, count: int) -> Op[tuple[str, list[SandboxInfo]]]:
    if count < 1:
        raise InvalidArgument("fork count must be at least 1")
    resp = yield req(
        "sandbox.fork", ids={"id": sandbox_id}, json={"count": int(count)}, extra_timeout=600
    )
    d = resp.json()
    return d["snapshot"], [SandboxInfo.from_json(s) for s in d["sandboxes"]]


def op_restore(snapshot_id: str, manifest: Optional[Mapping[str, Any]]) -> Op[SandboxInfo]:
    body = {} if manifest is None else {"manifest": dict(manifest)}
    resp = yield req("snapshot.restore", ids={"id": snapshot_id}, json=body, extra_timeout=300)
    return SandboxInfo.from_json(resp.json())


def op_snapshot_get(snapshot_id: str) -> Op[SnapshotInfo]:
    resp = yield req("snapshot.get", ids={"id": snapshot_id})
    return SnapshotInfo.from_json(resp.json())


def op_snapshot_list() -> Op[list[SnapshotInfo]]:
    resp = yield req("snapshot.list")
    return [SnapshotInfo.from_json(d) for d in resp.json()]


def op_snapshot_delete(snapshot_id: str) -> Op[None]:
    yield req("snapshot.delete", ids={"id": snapshot_id})
    return None


# ----- templates -------------------------------------------------------------


def _template_ref(reference: str) -> tuple[str, Optional[str]]:
    name, sep, version = reference.partition(":")
    if not name or (sep and not version.isdigit()):
        raise InvalidArgument(f"template reference {reference!r}: expected name or name:version")
    return name, (version if sep else None)


def op_template_create(name: str, from_sandbox: str) -> Op[TemplateInfo]:
    body = {"name": name, "from_sandbox": from_sandbox}
    resp = yield req("template.create", json=body, extra_timeout=600)
    return TemplateInfo.from_json(resp.json())


def op_template_list() -> Op[list[TemplateInfo]]:
    resp = yield req("template.list")
    return [TemplateInfo.from_json(d) for d in resp.json()]


def op_template_get(name: str) -> Op[list[TemplateInfo]]:
    resp = yield req("template.get", ids={"name": name})
    return [TemplateInfo.from_json(d) for d in resp.json()["versions"]]


def op_template_delete(reference: str) -> Op[list[TemplateInfo]]:
    name, version = _template_ref(reference)
    if version is None:
        resp = yield req("template.delete", ids={"name": name})
    else:
        resp = yield req("template.delete_version", ids={"name": name, "version": version})
    return [TemplateInfo.from_json(d) for d in resp.json()]


# ----- images ----------------------------------------------------------------


def op_image_list() -> Op[list[dict[str, Any]]]:
    resp = yield req("image.list")
    return list(resp.json())


def op_image_get(name: str) -> Op[dict[str, Any]]:
    resp = yield req("image.get", ids={"name": name})
    return dict(resp.json())


def op_image_delete(name: str) -> Op[None]:
    yield req("image.delete", ids={"name": name})
    return None


def op_image_import(archive: bytes, name: Optional[str]) -> Op[dict[str, Any]]:
    params = {"name": name} if name is not None else {}
    resp = yield req("image.import", params=params, content=bytes(archive), extra_timeout=300)
    return dict(resp.json())


# ----- files -----------------------------------------------------------------


def op_write(
    sandbox_id: str,
    path: str,
    data: Union[str, bytes],
    mode: Optional[int],
    exclusive: bool = False,
) -> Op[None]:
    params: dict[str, Any] = {"path": path}
    if mode is not None:
        params["mode"] = format(mode, "o")
    if exclusive:
        params["exclusive"] = "true"
    content = data.encode() if isinstance(data, str) else bytes(data)
    yield req("files.put", ids={"id": sandbox_id}, params=params, content=content, extra_timeout=60)
    return None


def op_read(
    sandbox_id: str, path: str, offset: Optional[int] = None, length: Optional[int] = None
) -> Op[bytes]:
    params: dict[str, Any] = {"path": path}
    if offset is not None:
        params["offset"] = int(offset)
    if length is not None:
        if length < 1:
            raise InvalidArgument("length must be at least 1")
        params["length"] = int(length)
    resp = yield req("files.get", ids={"id": sandbox_id}, params=params, extra_timeout=60)
    return resp.content


def op_stat(sandbox_id: str, path: str) -> Op[FileStat]:
    resp = yield req("files.stat", ids={"id": sandbox_id}, params={"path": path})
    return FileStat.from_json(resp.json())


def op_exists(sandbox_id: str, path: str) -> Op[bool]:
    resp = yield req("files.exists", ids={"id": sandbox_id}, params={"path": path})
    return bool(resp.json()["exists"])


def op_remove(sandbox_id: str, path: str, recursive: bool) -> Op[None]:
    params: dict[str, Any] = {"path": path}
    if recursive:
        params["recursive"] = "true"
    yield req("files.remove", ids={"id": sandbox_id}, params=params, extra_timeout=60)
    return None


def op_mkdir(sandbox_id: str, path: str, parents: bool) -> Op[None]:
    yield req("files.mkdir", ids={"id": sandbox_id}, json={"path": path, "parents": parents})
    return None


def op_rename(sandbox_id: str, src: str, dst: str) -> Op[None]:
    yield req("files.rename", ids={"id": sandbox_id}, json={"from": src, "to": dst})
    return None


def op_listdir(sandbox_id: str, path: str) -> Op[list[FileEntry]]:
    resp = yield req("files.list", ids={"id": sandbox_id}, params={"path": path})
    return [FileEntry.from_json(d) for d in resp.json()]


# ----- sessions ----------------------------------------------------------------

# The prompts are emptied before the first one is printed (`-c` runs before
# interactive mode starts): a prompt goes to stderr, and stderr is read apart
# from stdout, so one printed later could land after a chunk's marker.
PYTHON_ARGV = ["python3", "-i", "-u", "-q", "-c", "import sys as _s; _s.ps1 = _s.ps2 = ''; del _s"]

# Defined once in a python session: runs a chunk of code in the session's
# globals, prints any traceback, then a marker line that ends the chunk's
# output and says whether it raised.
# The chunk's stderr (and its traceback) goes to stdout while it runs: the
# session reads the two streams apart, so only one stream keeps the
# output in order with the marker.
_PY_SETUP = (
    "import sys as __stasis_sys\n"
    "__stasis_sys.ps1 = __stasis_sys.ps2 = ''\n"
    "def __stasis_run(src, marker):\n"
    "    import traceback\n"
    "    ok = True\n"
    "    err, __stasis_sys.stderr = __stasis_sys.stderr, __stasis_sys.stdout\n"
    "    try:\n"
    "        exec(compile(src, '<session>', 'exec'), globals())\n"
    "    except BaseException:\n"
    "        traceback.print_exc()\n"
    "        ok = False\n"
    "    finally:\n"
    "        __stasis_sys.stderr = err\n"
    "    __stasis_sys.stdout.flush(); __stasis_sys.stderr.flush()\n"
    "    print('\\n' + marker + ('ok' if ok else 'err'), flush=True)\n"
    "\n"
)


def op_session_start(
    sandbox_id: str,
    argv: Sequence[str],
    env: Optional[Mapping[str, str]],
    cwd: Optional[str],
    pty: Optional[tuple[int, int]] = None,
) -> Op[SessionInfo]:
    body: dict[str, Any] = {"argv": list(argv)}
    if env:
        body["env"] = dict(env)
    if cwd is not None:
        body["cwd"] = cwd
    if pty is not None:
        body["pty"] = {"cols": int(pty[0]), "rows": int(pty[1])}
    resp = yield req("session.start", ids={"id": sandbox_id}, json=body, extra_timeout=60)
    return SessionInfo.from_json(resp.json())


def op_session_list(sandbox_id: str) -> Op[list[SessionInfo]]:
    resp = yield req("session.list", ids={"id": sandbox_id})
    return [SessionInfo.from_json(d) for d in resp.json()]


def op_session_send(sandbox_id: str, session: str, data: Union[str, bytes]) -> Op[None]:
    raw = data.encode() if isinstance(data, str) else bytes(data)
    yield req(
        "session.input",
        ids={"id": sandbox_id, "session": session},
        json={"data_b64": base64.b64encode(raw).decode()},
        extra_timeout=60,
    )
    return None


def op_session_read(sandbox_id: str, session: str, offset: int, wait_ms: int) -> Op[SessionOutput]:
    wait_ms = max(0, min(int(wait_ms), 60_000))
    resp = yield req(
        "session.output",
        ids={"id": sandbox_id, "session": session},
        params={"offset": int(offset), "wait_ms": wait_ms},
        extra_timeout=wait_ms / 1000 + 60,
    )
    return SessionOutput.from_json(resp.json())


#: An output offset past any session's end: a read there only waits for the exit.
PAST_END = 2**63


def op_session_resize(sandbox_id: str, session: str, cols: int, rows: int) -> Op[None]:
    yield req(
        "session.resize",
        ids={"id": sandbox_id, "session": session},
        json={"cols": int(cols), "rows": int(rows)},
    )
    return None


def op_default_shell(sandbox_id: str) -> Op[list[str]]:
    """The terminal's default command: ``/bin/bash`` when the sandbox has it,
    else ``/bin/sh`` (one exec, which also resumes a paused sandbox)."""
    resp = yield req(
        "sandbox.exec",
        ids={"id": sandbox_id},
        json={"argv": ["/bin/sh", "-c", "test -x /bin/bash"], "timeout_ms": 30_000},
        extra_timeout=30,
    )
    return ["/bin/bash"] if resp.json().get("exit_code") == 0 else ["/bin/sh"]


def pty_argv(cmd: Union[str, Sequence[str], None]) -> Optional[list[str]]:
    """A terminal's command: a string runs through ``sh -c``, a sequence is
    the argv, ``None`` means the default shell."""
    if cmd is None:
        return None
    if isinstance(cmd, str):
        return ["/bin/sh", "-c", cmd]
    argv = [str(a) for a in cmd]
    if not argv:
        raise InvalidArgument("cmd must name a command")
    return argv


#: Signals a session accepts (``signal=`` of a session's ``kill``).
SESSION_SIGNALS = ("HUP", "INT", "QUIT", "KILL", "USR1", "USR2", "TERM")


def op_session_kill(sandbox_id: str, session: str, signal: Optional[str] = None) -> Op[None]:
    """Send ``signal`` to a session (default ``KILL``: its whole process
    tree; ``INT`` is a ^C to a command without a terminal)."""
    params = {} if signal is None else {"signal": str(signal)}
    yield req("session.kill", ids={"id": sandbox_id, "session": session}, params=params)
    return None


def op_read_until(
    sandbox_id: str, session: str, offset: int, marker: bytes, deadline_polls: int
) -> Op[tuple[bytes, int]]:
    """Read a session's output from ``offset`` until ``marker`` appears; return the
    bytes before the marker line's end and the offset after it."""
    buf = b""
    start = offset
    polls = 0
    while True:
        out = yield from op_session_read(sandbox_id, session, offset, 10_000)
        if out.offset > offset and not buf:
            start = out.offset  # older output was dropped from the session's buffer
        buf += out.data
        offset = out.next_offset
        i = buf.find(marker)
        if i >= 0:
            end = buf.find(b"\n", i)
            if end >= 0:
                consumed = start + end + 1
                return buf[: end + 1], consumed
        if not out.running:
            raise StasisError(
                f"session {session} ended before its output was complete: "
                f"{buf[-2000:].decode('utf-8', 'replace')}",
                code="invalid_state",
            )
        polls += 1
        if polls > deadline_polls:
            raise StasisError(
                f"no complete answer from session {session} in time", code="timeout"
            )


def op_python_setup(sandbox_id: str, session: str) -> Op[int]:
    marker = f"__stasis_ready_{uuid.uuid4().hex}__"
    yield from op_session_send(sandbox_id, session, _PY_SETUP + f"print({marker!r})\n")
    _, offset = yield from op_read_until(sandbox_id, session, 0, marker.encode(), 60)
    return offset


def op_python_run(
    sandbox_id: str, session: str, offset: int, code: str, timeout: float
) -> Op[tuple[str, bool, int]]:
    """Run code; return its output, whether it finished without raising, and
    the output offset after it."""
    marker = f"__stasis_done_{uuid.uuid4().hex}__"
    line = f"__stasis_run({code!r}, {marker!r})\n"
    yield from op_session_send(sandbox_id, session, line)
    polls = max(1, int(timeout / 10) + 1)
    data, offset = yield from op_read_until(sandbox_id, session, offset, marker.encode(), polls)
    text = data.decode("utf-8", "replace")
    i = text.rfind("\n" + marker)
    out, status = text[:i], text[i + 1 + len(marker) :].strip()
    return out, status == "ok", offset


def code_result(out: str, ok: bool) -> str:
    if not ok:
        raise CodeError(f"the code raised an exception:\n{out.strip()}", output=out)
    return out


# ----- runs ---------------------------------------------------------------------


def op_run_create(sandbox_id: Optional[str]) -> Op[dict[str, Any]]:
    resp = yield req("run.create", json={"sandbox": sandbox_id} if sandbox_id else {})
    return resp.json()


def op_run_get(run_id: str) -> Op[dict[str, Any]]:
    resp = yield req("run.get", ids={"id": run_id})
    return resp.json()


def op_run_list() -> Op[list[dict[str, Any]]]:
    resp = yield req("run.list")
    return resp.json()


def op_run_step(run_id: str, kind: str, data: Any) -> Op[dict[str, Any]]:
    body: dict[str, Any] = {"kind": kind}
    if data is not None:
        body["data"] = data
    resp = yield req("run.step", ids={"id": run_id}, json=body)
    return resp.json()


def op_run_call(
    run_id: str,
    key: str,
    cmd: Argv,
    *,
    side_effecting: bool,
    requires_approval: bool,
    cwd: Optional[str],
    timeout: Optional[float],
    env: Optional[Mapping[str, str]],
) -> Op[CallOutcome]:
    body: dict[str, Any] = {
        "idempotency_key": key,
        "kind": "exec",
        "argv": argv_of(cmd),
        "side_effecting": side_effecting,
        "requires_approval": requires_approval,
    }
    if cwd is not None:
        body["cwd"] = cwd
    if timeout is not None:
        body["timeout_ms"] = max(1, int(timeout * 1000))
    if env:
        body["env"] = dict(env)
    resp = yield req(
        "run.call", ids={"id": run_id}, json=body, extra_timeout=exec_extra_timeout(timeout)
    )
    return CallOutcome.from_json(resp.json())


def op_run_decide(run_id: str, call: str, approve: bool, reason: str) -> Op[CallOutcome]:
    resp = yield req(
        "run.approve" if approve else "run.reject",
        ids={"id": run_id, "call": call},
        json={"reason": reason},
        extra_timeout=exec_extra_timeout(None),
    )
    return CallOutcome.from_json(resp.json())


def op_run_state(run_id: str) -> Op[dict[str, Any]]:
    resp = yield req("run.state", ids={"id": run_id})
    return resp.json()


def op_run_resume(document: Mapping[str, Any], sandbox_id: Optional[str]) -> Op[ResumeReport]:
    body: Any = dict(document) if sandbox_id is None else {
        "document": dict(document),
        "sandbox": sandbox_id,
    }
    resp = yield req("run.resume", json=body)
    return ResumeReport.from_json(resp.json())


# ----- streaming exec ---------------------------------------------------------


class LineDecoder:
    """Splits an NDJSON byte stream into decoded lines, incrementally."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        self._buf += chunk
        lines = []
        while True:
            i = self._buf.find(b"\n")
            if i < 0:
                return lines
            line, self._buf = self._buf[:i], self._buf[i + 1 :]
            if line.strip():
                lines.append(json.loads(line))

    def finish(self) -> list[dict[str, Any]]:
        rest, self._buf = self._buf, b""
        return [json.loads(rest)] if rest.strip() else []


def stream_line(
    line: dict[str, Any], out: list[bytes], err: list[bytes]
) -> Union[tuple[str, bytes], ExecResult]:
    """Interpret one NDJSON line: an output chunk, or the final result."""
    kind = line.get("type")
    if kind == "output":
        data = base64.b64decode(line.get("data_b64") or "")
        stream = str(line.get("stream", "stdout"))
        (err if stream == "stderr" else out).append(data)
        return stream, data
    if kind == "exit":
        return ExecResult(
            exit_code=line.get("exit_code"),
            stdout=b"".join(out),
            stderr=b"".join(err),
            timed_out=bool(line.get("timed_out")),
            truncated=bool(line.get("truncated")),
            duration_ms=int(line.get("duration_ms") or 0),
            signal=line.get("signal"),
        )
    if kind == "error":
        from .errors import BY_CODE

        code = str(line.get("code", "internal"))
        cls = BY_CODE.get(code, StasisError)
        raise cls(str(line.get("message", "")), code=code)
    raise StasisError(f"unexpected line in the exec stream: {line!r}")


def op_network(sandbox_id: str) -> Op[dict[str, Any]]:
    resp = yield req("sandbox.network", ids={"id": sandbox_id})
    return resp.json()


def op_set_network(
    sandbox_id: str, allow: Sequence[str], deny: Sequence[str]
) -> Op[dict[str, Any]]:
    for name, v in (("allow", allow), ("deny", deny)):
        if isinstance(v, str):
            raise TypeError(f"{name} must be a list of entries, not a string")
    body = {"allow": list(allow), "deny": list(deny)}
    resp = yield req("sandbox.set_network", ids={"id": sandbox_id}, json=body)
    return resp.json()


# ----- tokens and webhooks ---------------------------------------------------


def op_token_create(
    name: str,
    scopes: Optional[Sequence[str]],
    ttl_secs: Optional[int],
    sandbox: Optional[str],
) -> Op[dict[str, Any]]:
    body: dict[str, Any] = {"name": name}
    if scopes is not None:
        body["scopes"] = list(scopes)
    if ttl_secs is not None:
        body["ttl_secs"] = ttl_secs
    if sandbox is not None:
        body["sandbox"] = sandbox
    resp = yield req("token.create", json=body)
    return dict(resp.json())


def op_token_list() -> Op[list[dict[str, Any]]]:
    resp = yield req("token.list")
    return list(resp.json())


def op_token_revoke(token_id: str) -> Op[dict[str, Any]]:
    resp = yield req("token.revoke", ids={"token": token_id})
    return dict(resp.json())


def op_token_rotate(token_id: str, overlap_secs: Optional[int]) -> Op[dict[str, Any]]:
    body = {} if overlap_secs is None else {"overlap_secs": overlap_secs}
    resp = yield req("token.rotate", ids={"token": token_id}, json=body)
    return dict(resp.json())


def op_webhook_create(url: str, events: Optional[Sequence[str]]) -> Op[dict[str, Any]]:
    body: dict[str, Any] = {"url": url}
    if events is not None:
        body["events"] = list(events)
    resp = yield req("webhook.create", json=body)
    return dict(resp.json())


def op_webhook_list() -> Op[list[dict[str, Any]]]:
    resp = yield req("webhook.list")
    return list(resp.json())


def op_webhook_delete(webhook_id: str) -> Op[None]:
    yield req("webhook.delete", ids={"id": webhook_id})
    return None


def op_webhook_dead_letters(webhook_id: str) -> Op[list[dict[str, Any]]]:
    resp = yield req("webhook.dead_letters", ids={"id": webhook_id})
    return list(resp.json())
