"""The synchronous client.

    from stasis_client import Sandbox

    with Sandbox.create(manifest={"lifecycle": {"idle_timeout_secs": 30}}) as sbx:
        print(sbx.exec("echo hi").text)
        py = sbx.session("python")
        py.run("x = 6 * 7")
        sbx.pause()
        print(py.run("print(x)"))      # the sandbox resumes transparently
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar, Union

import httpx

from . import _core
from ._core import Argv, Config, Op, Req, Resp
from .errors import ConnectionFailed, InvalidArgument
from .models import (
    CallOutcome,
    ExecResult,
    FileEntry,
    FileEvent,
    FileStat,
    OutputChunk,
    ResumeReport,
    SandboxInfo,
    SandboxPage,
    SessionInfo,
    SessionOutput,
    PortUrl,
    SnapshotInfo,
    TemplateInfo,
)

T = TypeVar("T")


class Client:
    """A connection to a stasis daemon.

    ``base_url`` defaults to ``$STASIS_URL`` (else ``http://127.0.0.1:7070``).
    The token is ``token``, else ``$STASIS_TOKEN``, else read from ``token_file``
    or ``$STASIS_TOKEN_FILE``; it is sent as ``Authorization: Bearer``.
    """

    def __init__(
        self,
        base_url: Optional[str] = None,
        *,
        token: Optional[str] = None,
        token_file: Union[str, Path, None] = None,
        actor: Optional[str] = None,
        timeout: float = 30.0,
        transport: Optional[httpx.BaseTransport] = None,
    ) -> None:
        self.config = Config.make(base_url, token, token_file, actor, timeout)
        self._http = httpx.Client(
            base_url=self.config.base_url,
            headers=self.config.headers(),
            timeout=timeout,
            transport=transport,
        )
        self.runs = Runs(self)
        self.templates = Templates(self)
        self.tokens = Tokens(self)
        self.webhooks = Webhooks(self)

    # -- plumbing --

    def _send(self, r: Req) -> Resp:
        try:
            resp = self._http.request(
                r.method,
                r.path,
                params=r.params or None,
                json=r.json if r.content is None else None,
                content=r.content,
                headers={"content-type": "application/octet-stream"} if r.content is not None else None,
                timeout=self.config.timeout + r.extra_timeout,
            )
        except httpx.TransportError as e:
            raise ConnectionFailed(
                f"cannot reach the stasis daemon at {self.config.base_url}: {e}"
            ) from e
        _core.check(r, resp.status_code, resp.content)
        return Resp(resp.status_code, resp.content, resp.headers)

    def _run(self, op: Op[T]) -> T:
        try:
            r = next(op)
            while True:
                r = op.send(self._send(r))
        except StopIteration as done:
            return done.value

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- API --

    def health(self) -> bool:
        self._run(_health())
        return True

    def create(
        self,
        manifest: Optional[Mapping[str, Any]] = None,
        *,
        template: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
    ) -> "Sandbox":
        """A new sandbox; with ``template`` (``name`` or ``name:version``) its
        state is restored from that template instead of a cold boot, and a
        ``manifest`` given replaces the template's. ``labels``: key/value
        metadata to filter listings on."""
        return Sandbox(self, self._run(_core.op_create(manifest, template, labels)))

    def get(self, sandbox_id: str) -> "Sandbox":
        return Sandbox(self, self._run(_core.op_get(sandbox_id)))

    def list(self, state: Optional[str] = None) -> list[SandboxInfo]:
        return self._run(_core.op_list(state))

    def list_page(
        self,
        *,
        state: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        created_after: Any = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> SandboxPage:
        """One page of this tenant's sandboxes, oldest first, filtered by
        state, labels (all must match) and creation time (a datetime, or ms
        since the epoch)."""
        return self._run(_core.op_list_page(state, labels, created_after, limit, cursor))

    def restore(self, snapshot_id: str, manifest: Optional[Mapping[str, Any]] = None) -> "Sandbox":
        return Sandbox(self, self._run(_core.op_restore(snapshot_id, manifest)))

    def images(self) -> list[dict[str, Any]]:
        """Your images, then the public ones (name, tag, owner, id)."""
        return self._run(_core.op_image_list())

    def image(self, name: str) -> dict[str, Any]:
        """One image (``name[:tag]`` or ``sha256:...``): id, names, record."""
        return self._run(_core.op_image_get(name))

    def delete_image(self, name: str) -> None:
        self._run(_core.op_image_delete(name))

    def import_image(self, archive: bytes, name: Optional[str] = None) -> dict[str, Any]:
        """Import an OCI image layout tar or a ``docker save`` tar."""
        return self._run(_core.op_image_import(archive, name))

    def snapshots(self) -> list[SnapshotInfo]:
        return self._run(_core.op_snapshot_list())

    def snapshot(self, snapshot_id: str) -> SnapshotInfo:
        return self._run(_core.op_snapshot_get(snapshot_id))

    def delete_snapshot(self, snapshot_id: str) -> None:
        self._run(_core.op_snapshot_delete(snapshot_id))


def _health() -> Op[None]:
    yield _core.req("health")
    return None


def _client_of(client: Optional[Client], kwargs: dict[str, Any]) -> Client:
    if client is not None:
        if kwargs:
            raise InvalidArgument("give either a client or connection arguments, not both")
        return client
    return Client(**kwargs)


class Sandbox:
    """A stasis sandbox. Used as a context manager it is destroyed on exit."""

    def __init__(self, client: Client, info: SandboxInfo) -> None:
        self.client = client
        self.info = info
        self.files = Files(self)

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def state(self) -> str:
        return self.info.state

    def __repr__(self) -> str:
        return f"Sandbox({self.id!r}, state={self.info.state!r})"

    # -- constructors --

    @classmethod
    def create(
        cls,
        manifest: Optional[Mapping[str, Any]] = None,
        *,
        template: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        client: Optional[Client] = None,
        **connect: Any,
    ) -> "Sandbox":
        """A new sandbox, cold or (``template="name[:version]"``) from a template."""
        return _client_of(client, connect).create(manifest, template=template, labels=labels)

    @classmethod
    def list(
        cls,
        *,
        state: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        created_after: Any = None,
        limit: int = 100,
        client: Optional[Client] = None,
        **connect: Any,
    ) -> "SandboxPaginator":
        """The tenant's sandboxes page by page (``limit`` per page): iterate
        it for every one, or call ``next_items()`` while ``has_next``."""
        return SandboxPaginator(
            _client_of(client, connect), state, labels, created_after, limit
        )

    @classmethod
    def from_snapshot(
        cls,
        snapshot_id: str,
        manifest: Optional[Mapping[str, Any]] = None,
        *,
        client: Optional[Client] = None,
        **connect: Any,
    ) -> "Sandbox":
        """A new sandbox restored from a snapshot (optionally under another manifest)."""
        return _client_of(client, connect).restore(snapshot_id, manifest)

    @classmethod
    def connect(
        cls, sandbox_id: str, *, client: Optional[Client] = None, **connect: Any
    ) -> "Sandbox":
        """Reattach to an existing sandbox by id (it is not resumed until used)."""
        return _client_of(client, connect).get(sandbox_id)

    # -- lifecycle --

    def refresh(self) -> SandboxInfo:
        self.info = self.client._run(_core.op_get(self.id))
        return self.info

    def pause(self, *, keep_memory: Optional[bool] = None) -> SandboxInfo:
        self.info = self.client._run(_core.op_pause(self.id, keep_memory))
        return self.info

    def resume(self) -> SandboxInfo:
        self.info = self.client._run(_core.op_resume(self.id))
        return self.info

    def snapshot(self, *, ttl_secs: Optional[int] = None) -> SnapshotInfo:
        return self.client._run(_core.op_snapshot(self.id, ttl_secs))

    def fork(self, n: int) -> list["Sandbox"]:
        _, children = self.client._run(_core.op_fork(self.id, n))
        return [Sandbox(self.client, c) for c in children]

    def destroy(self) -> SandboxInfo:
        self.info = self.client._run(_core.op_destroy(self.id))
        return self.info

    def set_timeout(self, timeout: float) -> SandboxInfo:
        """Destroy the sandbox after ``timeout`` more seconds of running time
        (E2B's name; paused time does not count). Audited as ``lifecycle.set``."""
        secs = int(-(-float(timeout) // 1))
        if secs < 1:
            raise InvalidArgument("timeout must be at least 1 second")
        return self.set_lifecycle(timeout_secs=secs)

    def set_lifecycle(
        self,
        *,
        idle_timeout_secs: Optional[int] = None,
        on_idle: Optional[str] = None,
        paused_ttl_secs: Optional[int] = None,
        max_lifetime_secs: Optional[int] = None,
        timeout_secs: Optional[int] = None,
    ) -> SandboxInfo:
        """Change the lifecycle policy at runtime (the fields given; the
        others stay). Bad values raise ``InvalidArgument`` naming the field."""
        change = dict(
            idle_timeout_secs=idle_timeout_secs,
            on_idle=on_idle,
            paused_ttl_secs=paused_ttl_secs,
            max_lifetime_secs=max_lifetime_secs,
            timeout_secs=timeout_secs,
        )
        self.info = self.client._run(_core.op_set_lifecycle(self.id, change))
        return self.info

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.info.state not in ("destroyed", "destroying"):
            self.destroy()

    # -- commands --

    def exec(
        self,
        cmd: Argv,
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        timeout: Optional[float] = None,
        stdin: Union[str, bytes, None] = None,
        on_output: Optional[Callable[[OutputChunk], None]] = None,
    ) -> ExecResult:
        """Run a command (a string goes through ``sh -c``). With ``on_output``,
        the output is streamed to the callback as it is produced."""
        if on_output is None:
            body = _core.exec_body(cmd, env, cwd, timeout, stdin)
            return self.client._run(_core.op_exec(self.id, body, timeout))
        stream = self.exec_stream(cmd, env=env, cwd=cwd, timeout=timeout, stdin=stdin)
        for chunk in stream:
            on_output(chunk)
        assert stream.result is not None
        return stream.result

    def exec_stream(
        self,
        cmd: Argv,
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        timeout: Optional[float] = None,
        stdin: Union[str, bytes, None] = None,
    ) -> "ExecStream":
        """Iterate over the output chunks of a command as they arrive; the
        result is in ``.result`` once the iteration ends."""
        return ExecStream(self, _core.exec_body(cmd, env, cwd, timeout, stdin), timeout)

    # -- sessions --

    def session(
        self,
        kind: Union[str, Sequence[str]] = "python",
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
    ) -> "Session":
        """Start a persistent process. ``"python"`` starts an interpreter whose
        variables survive between :meth:`Session.run` calls (and pause/resume);
        a sequence is any argv, driven with ``send``/``read``."""
        if isinstance(kind, str):
            if kind != "python":
                raise InvalidArgument(f"unknown session kind {kind!r} (give 'python' or an argv)")
            info = self.client._run(_core.op_session_start(self.id, _core.PYTHON_ARGV, env, cwd))
            s = Session(self, info, python=True)
            s._offset = self.client._run(_core.op_python_setup(self.id, info.id))
            return s
        info = self.client._run(_core.op_session_start(self.id, list(kind), env, cwd))
        return Session(self, info, python=False)

    def sessions(self) -> list[SessionInfo]:
        return self.client._run(_core.op_session_list(self.id))

    def attach_session(self, session_id: str, *, python: bool = False, offset: int = 0) -> "Session":
        """A handle on an existing session (ids are stable across pause/resume)."""
        for info in self.sessions():
            if info.id == session_id:
                s = Session(self, info, python=python)
                s._offset = offset if offset else info.output_end
                return s
        from .errors import NotFound

        raise NotFound(f"session {session_id} not found in sandbox {self.id}")

    def pty(
        self,
        cmd: Union[str, Sequence[str], None] = None,
        *,
        cols: int = 80,
        rows: int = 24,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
    ) -> "Pty":
        """Start ``cmd`` on a terminal of ``cols`` x ``rows`` (default: the
        sandbox's ``/bin/bash``, else ``/bin/sh``; a string runs through
        ``sh -c``). The command sees a TTY; input goes through the terminal
        (``"\\x03"`` is Ctrl-C)."""
        argv = _core.pty_argv(cmd)
        if argv is None:
            argv = self.client._run(_core.op_default_shell(self.id))
        info = self.client._run(_core.op_session_start(self.id, argv, env, cwd, (cols, rows)))
        return Pty(self, info)

    def usage(self) -> dict[str, Any]:
        return self.client._run(_usage(self.id))

    def port_url(self, port: int, *, ttl: Optional[int] = None) -> PortUrl:
        """A signed URL to ``port`` inside the sandbox (``/p/<token>/``) that
        needs no API token, for ``ttl`` seconds (default 3600, 5 to 604800).
        A request through it resumes a paused sandbox."""
        return self.client._run(_core.op_port_url(self.client.config.base_url, self.id, port, ttl))

    def revoke_port_urls(self, port: int, url_id: Optional[str] = None) -> None:
        """Revoke one signed URL of ``port`` (``url_id``), or all of them."""
        self.client._run(_core.op_port_revoke(self.id, port, url_id))

    def network(self) -> dict[str, Any]:
        """The network policy in force (``policy.allow``/``policy.deny``) and,
        while the sandbox is attached, its egress counters."""
        return self.client._run(_core.op_network(self.id))

    def set_network(
        self, *, allow: Sequence[str] = (), deny: Sequence[str] = ()
    ) -> dict[str, Any]:
        """Replace the network policy (both lists) without a restart: names
        (``pypi.org``), one-label wildcards (``*.pythonhosted.org``),
        addresses and networks (``10.1.0.0/16``), each with an optional
        ``:port``. A bad entry raises ``InvalidManifest`` naming the field."""
        return self.client._run(_core.op_set_network(self.id, allow, deny))


def _usage(sandbox_id: str) -> Op[dict[str, Any]]:
    resp = yield _core.req("sandbox.usage", ids={"id": sandbox_id})
    return resp.json()


class ExecStream:
    """Iterator over a streaming exec's output chunks."""

    def __init__(self, sbx: Sandbox, body: dict[str, Any], timeout: Optional[float]) -> None:
        self._sbx = sbx
        self._body = body
        self._timeout = timeout
        self.result: Optional[ExecResult] = None

    def __iter__(self) -> Iterator[OutputChunk]:
        client = self._sbx.client
        r = _core.req("sandbox.exec_stream", ids={"id": self._sbx.id}, json=self._body)
        dec = _core.LineDecoder()
        out: list[bytes] = []
        err: list[bytes] = []
        try:
            with client._http.stream(
                r.method,
                r.path,
                json=r.json,
                timeout=client.config.timeout + _core.exec_extra_timeout(self._timeout),
            ) as resp:
                if resp.status_code not in r.ok:
                    resp.read()
                    _core.check(r, resp.status_code, resp.content)
                for chunk in resp.iter_bytes():
                    for line in dec.feed(chunk):
                        got = _core.stream_line(line, out, err)
                        if isinstance(got, ExecResult):
                            self.result = got
                        else:
                            yield OutputChunk(*got)
                for line in dec.finish():
                    got = _core.stream_line(line, out, err)
                    if isinstance(got, ExecResult):
                        self.result = got
        except httpx.TransportError as e:
            raise ConnectionFailed(f"exec stream from {client.config.base_url} broke: {e}") from e
        if self.result is None:
            raise ConnectionFailed("the exec stream ended without an exit line")


class Files:
    """Files inside a sandbox (paths are absolute or relative to its workdir)."""

    def __init__(self, sbx: Sandbox) -> None:
        self._sbx = sbx

    def write(
        self,
        path: str,
        data: Union[str, bytes],
        *,
        mode: Optional[int] = None,
        exclusive: bool = False,
    ) -> None:
        """Write a file (parents made). ``exclusive``: create it only if
        nothing is at ``path``, else raise ``AlreadyExists``."""
        self._sbx.client._run(_core.op_write(self._sbx.id, path, data, mode, exclusive))

    def read(
        self, path: str, *, offset: Optional[int] = None, length: Optional[int] = None
    ) -> bytes:
        """The file, or ``length`` bytes from ``offset`` (fewer at its end)."""
        return self._sbx.client._run(_core.op_read(self._sbx.id, path, offset, length))

    def read_text(self, path: str) -> str:
        return self.read(path).decode("utf-8")

    def list(self, path: str = ".") -> list[FileEntry]:
        return self._sbx.client._run(_core.op_listdir(self._sbx.id, path))

    def stat(self, path: str) -> FileStat:
        """The entry itself (a symlink is not followed); ``NotFound`` if missing."""
        return self._sbx.client._run(_core.op_stat(self._sbx.id, path))

    def exists(self, path: str) -> bool:
        return self._sbx.client._run(_core.op_exists(self._sbx.id, path))

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """A file, a symlink, an empty directory, or with ``recursive`` a tree."""
        self._sbx.client._run(_core.op_remove(self._sbx.id, path, recursive))

    def mkdir(self, path: str, *, parents: bool = True) -> None:
        """Make a directory (with ``parents=False``, ``AlreadyExists`` if it is there)."""
        self._sbx.client._run(_core.op_mkdir(self._sbx.id, path, parents))

    def rename(self, src: str, dst: str) -> None:
        """Move ``src`` to ``dst`` (an existing file at ``dst`` is replaced)."""
        self._sbx.client._run(_core.op_rename(self._sbx.id, src, dst))

    def watch(self, path: str = ".") -> "FileWatch":
        """Changes under the directory ``path`` as :class:`FileEvent`s, for as
        long as the watch is iterated and not closed (use it in ``with``)."""
        return FileWatch(self._sbx, path)


class FileWatch:
    """An open watch: iterate for events; ``close()`` (or leave the ``with``) to stop."""

    def __init__(self, sbx: Sandbox, path: str) -> None:
        client = sbx.client
        r = _core.req("files.watch", ids={"id": sbx.id}, params={"path": path})
        self._cm = client._http.stream(
            r.method,
            r.path,
            params=r.params,
            timeout=httpx.Timeout(client.config.timeout, read=None),
        )
        try:
            self._resp = self._cm.__enter__()
        except httpx.TransportError as e:
            raise ConnectionFailed(f"watch on {client.config.base_url} failed: {e}") from e
        if self._resp.status_code not in r.ok:
            self._resp.read()
            content = self._resp.content
            self.close()
            _core.check(r, self._resp.status_code, content)

    def __iter__(self) -> Iterator[FileEvent]:
        dec = _core.LineDecoder()
        try:
            for chunk in self._resp.iter_bytes():
                for line in dec.feed(chunk):
                    yield FileEvent.from_json(line)
        except (httpx.TransportError, httpx.StreamClosed):
            return

    def close(self) -> None:
        try:
            self._cm.__exit__(None, None, None)
        except Exception:
            pass

    def __enter__(self) -> "FileWatch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SandboxPaginator:
    """Pages of ``Sandbox.list``: ``has_next`` / ``next_items()``, or iterate."""

    def __init__(
        self,
        client: Client,
        state: Optional[str],
        labels: Optional[Mapping[str, str]],
        created_after: Any,
        limit: int,
    ) -> None:
        self._client = client
        self._args = (state, labels, created_after, limit)
        self._cursor: Optional[str] = None
        self.has_next = True

    @property
    def next_token(self) -> Optional[str]:
        return self._cursor

    def next_items(self) -> list[SandboxInfo]:
        if not self.has_next:
            raise InvalidArgument("no more pages")
        state, labels, after, limit = self._args
        page = self._client.list_page(
            state=state, labels=labels, created_after=after, limit=limit, cursor=self._cursor
        )
        self._cursor = page.next_cursor
        self.has_next = page.next_cursor is not None
        return page.sandboxes

    def __iter__(self) -> Iterator[SandboxInfo]:
        while self.has_next:
            yield from self.next_items()


class Session:
    """A persistent process in a sandbox; its id survives pause/resume."""

    def __init__(self, sbx: Sandbox, info: SessionInfo, *, python: bool) -> None:
        self.sandbox = sbx
        self.info = info
        self.python = python
        self._offset = 0

    @property
    def id(self) -> str:
        return self.info.id

    def run(self, code: str, *, timeout: float = 300.0) -> str:
        """Python sessions: run code in the interpreter's globals and return its
        output; raises :class:`~stasis_client.errors.CodeError` if it raised."""
        if not self.python:
            raise InvalidArgument("run() needs a python session; use send()/read()")
        out, ok, self._offset = self.sandbox.client._run(
            _core.op_python_run(self.sandbox.id, self.id, self._offset, code, timeout)
        )
        return _core.code_result(out, ok)

    def send(self, data: Union[str, bytes]) -> None:
        self.sandbox.client._run(_core.op_session_send(self.sandbox.id, self.id, data))

    def read(self, *, offset: Optional[int] = None, wait_ms: int = 0) -> SessionOutput:
        """Output from ``offset`` (default: where the last read ended)."""
        out = self.sandbox.client._run(
            _core.op_session_read(
                self.sandbox.id, self.id, self._offset if offset is None else offset, wait_ms
            )
        )
        self._offset = out.next_offset
        return out

    def kill(self, signal: Optional[str] = None) -> None:
        """Send ``signal`` (``INT``, ``TERM``, ``HUP``, ...; default ``KILL``:
        the whole process tree). The session's output and exit status stay
        readable after it ended."""
        self.sandbox.client._run(_core.op_session_kill(self.sandbox.id, self.id, signal))


class Pty:
    """A command on a terminal in a sandbox (a session with a PTY). Output is
    the terminal's (``\\r\\n`` line ends, echoed input); it survives
    pause/resume like any session. Use as a context manager to kill it."""

    def __init__(self, sbx: Sandbox, info: SessionInfo) -> None:
        self.sandbox = sbx
        self.info = info
        self._offset = 0
        self._ended = False
        self.exit_code: Optional[int] = None

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def offset(self) -> int:
        """Where the next :meth:`read` starts."""
        return self._offset

    def write(self, data: Union[str, bytes]) -> None:
        self.sandbox.client._run(_core.op_session_send(self.sandbox.id, self.id, data))

    def read(self, timeout: float = 1.0) -> bytes:
        """Output since the last read, waiting up to ``timeout`` seconds for
        some; ``b""`` when none came (see :attr:`ended`)."""
        out = self.sandbox.client._run(
            _core.op_session_read(self.sandbox.id, self.id, self._offset, int(timeout * 1000))
        )
        self._offset = out.next_offset
        if not out.running and not out.data:
            self._ended = True
            self.exit_code = out.exit_code
        return out.data

    @property
    def ended(self) -> bool:
        """The command has exited and all its output was read."""
        return self._ended

    def __iter__(self) -> Iterator[bytes]:
        """Output chunks until the command exits."""
        while not self._ended:
            data = self.read(timeout=10.0)
            if data:
                yield data

    def resize(self, cols: int, rows: int) -> None:
        """Change the terminal size (the command gets SIGWINCH)."""
        self.sandbox.client._run(_core.op_session_resize(self.sandbox.id, self.id, cols, rows))
        self.info.pty = (cols, rows)

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        """Wait for the command to exit and return its exit status (output
        not read yet stays readable)."""
        from .errors import Timeout

        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = 10.0 if deadline is None else min(10.0, deadline - time.monotonic())
            if left <= 0:
                raise Timeout(f"terminal session {self.id} still running", code="timeout")
            out = self.sandbox.client._run(
                _core.op_session_read(self.sandbox.id, self.id, _core.PAST_END, int(left * 1000))
            )
            if not out.running:
                self.exit_code = out.exit_code
                return out.exit_code

    def close(self) -> None:
        """Kill the command (a no-op once it has exited)."""
        from .errors import InvalidState, NotFound

        if not self._ended:
            try:
                self.sandbox.client._run(_core.op_session_kill(self.sandbox.id, self.id))
            except (InvalidState, NotFound):
                pass

    def __enter__(self) -> "Pty":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Runs:
    """Runs, idempotent tool calls and approvals (``client.runs``)."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def create(self, sandbox: Union[str, Sandbox, None] = None) -> "Run":
        sid = sandbox.id if isinstance(sandbox, Sandbox) else sandbox
        return Run(self._c, self._c._run(_core.op_run_create(sid)))

    def get(self, run_id: str) -> "Run":
        return Run(self._c, self._c._run(_core.op_run_get(run_id)))

    def list(self) -> list[dict[str, Any]]:
        return self._c._run(_core.op_run_list())

    def resume(
        self, document: Mapping[str, Any], *, sandbox: Union[str, Sandbox, None] = None
    ) -> ResumeReport:
        """Verify a RunState document; with ``sandbox``, move the run there."""
        sid = sandbox.id if isinstance(sandbox, Sandbox) else sandbox
        return self._c._run(_core.op_run_resume(document, sid))


class Templates:
    """Named, versioned snapshots to start sandboxes from (``client.templates``)."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def create(self, name: str, from_sandbox: Union[str, Sandbox]) -> TemplateInfo:
        """Publish the sandbox's memory and disk as the next version of ``name``.
        Refused (:class:`InvalidState`) when its state holds a tenant secret."""
        sid = from_sandbox.id if isinstance(from_sandbox, Sandbox) else from_sandbox
        return self._c._run(_core.op_template_create(name, sid))

    def list(self) -> list[TemplateInfo]:
        """Every live version of every template."""
        return self._c._run(_core.op_template_list())

    def get(self, name: str) -> list[TemplateInfo]:
        """The live versions of ``name``, oldest first."""
        return self._c._run(_core.op_template_get(name))

    def delete(self, reference: str) -> list[TemplateInfo]:
        """Delete ``name`` (every version) or ``name:version``; returns what went."""
        return self._c._run(_core.op_template_delete(reference))


class Tokens:
    """This tenant's API tokens (``client.tokens``; needs the ``manage`` scope)."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def create(
        self,
        name: str,
        *,
        scopes: Optional[Sequence[str]] = None,
        ttl_secs: Optional[int] = None,
        sandbox: Optional[str] = None,
    ) -> dict[str, Any]:
        """Mint a token (its text is in ``["token"]``, shown only here):
        ``scopes`` among read, exec, approve, manage (default: the caller's),
        ``ttl_secs`` (60 s to 366 days), ``sandbox`` to limit it to one sandbox.
        Never wider than the calling token."""
        return self._c._run(_core.op_token_create(name, scopes, ttl_secs, sandbox))

    def list(self) -> list[dict[str, Any]]:
        """The tenant's tokens (never their text), with scopes, expiry, last use."""
        return self._c._run(_core.op_token_list())

    def revoke(self, token_id: str) -> dict[str, Any]:
        return self._c._run(_core.op_token_revoke(token_id))

    def rotate(self, token_id: str, *, overlap_secs: Optional[int] = None) -> dict[str, Any]:
        """A new token like ``token_id``; the old one stays valid for
        ``overlap_secs`` (default 600), so clients switch without downtime."""
        return self._c._run(_core.op_token_rotate(token_id, overlap_secs))


class Webhooks:
    """Signed lifecycle webhooks (``client.webhooks``)."""

    def __init__(self, client: Client) -> None:
        self._c = client

    def create(self, url: str, *, events: Optional[Sequence[str]] = None) -> dict[str, Any]:
        """Register an endpoint (a host the operator allows); the signing
        secret is in ``["secret"]``, shown only here."""
        return self._c._run(_core.op_webhook_create(url, events))

    def list(self) -> list[dict[str, Any]]:
        return self._c._run(_core.op_webhook_list())

    def delete(self, webhook_id: str) -> None:
        self._c._run(_core.op_webhook_delete(webhook_id))

    def dead_letters(self, webhook_id: str) -> list[dict[str, Any]]:
        """Events the endpoint never acknowledged after every retry."""
        return self._c._run(_core.op_webhook_dead_letters(webhook_id))


class Run:
    def __init__(self, client: Client, data: dict[str, Any]) -> None:
        self._c = client
        self.data = data

    @property
    def id(self) -> str:
        return str(self.data["id"])

    @property
    def status(self) -> str:
        return str(self.data["status"])

    def refresh(self) -> "Run":
        self.data = self._c._run(_core.op_run_get(self.id))
        return self

    def step(self, kind: str, data: Any = None) -> "Run":
        self.data = self._c._run(_core.op_run_step(self.id, kind, data))
        return self

    def call(
        self,
        idempotency_key: str,
        cmd: Argv,
        *,
        side_effecting: bool = False,
        requires_approval: bool = False,
        cwd: Optional[str] = None,
        timeout: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
    ) -> CallOutcome:
        """A tool call with an idempotency key: runs once; a retry with the same
        key returns the recorded outcome. With ``requires_approval`` it is held
        (outcome ``awaiting_approval``) until approved."""
        o = self._c._run(
            _core.op_run_call(
                self.id,
                idempotency_key,
                cmd,
                side_effecting=side_effecting,
                requires_approval=requires_approval,
                cwd=cwd,
                timeout=timeout,
                env=env,
            )
        )
        self.data = o.run
        return o

    def approve(self, call: str, reason: str = "") -> CallOutcome:
        o = self._c._run(_core.op_run_decide(self.id, call, True, reason))
        self.data = o.run
        return o

    def reject(self, call: str, reason: str = "") -> CallOutcome:
        o = self._c._run(_core.op_run_decide(self.id, call, False, reason))
        self.data = o.run
        return o

    def state(self) -> dict[str, Any]:
        """The signed RunState document."""
        return self._c._run(_core.op_run_state(self.id))
