"""The asynchronous client: the same operations as :mod:`stasis_client.client`,
driven by ``httpx.AsyncClient``.

    from stasis_client.aio import AsyncSandbox

    async with await AsyncSandbox.create() as sbx:
        async for chunk in sbx.exec_stream("for i in 1 2 3; do echo $i; sleep 1; done"):
            print(chunk.data)
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Awaitable, Callable, Optional, TypeVar, Union

import httpx

from . import _core
from ._core import Argv, Config, Op, Req, Resp
from .errors import ConnectionFailed, InvalidArgument, NotFound
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


class AsyncClient:
    """Async connection to a stasis daemon (same arguments as :class:`~stasis_client.Client`)."""

    def __init__(
        self,
        base_url: Optional[str] = None,
        *,
        token: Optional[str] = None,
        token_file: Union[str, Path, None] = None,
        actor: Optional[str] = None,
        timeout: float = 30.0,
        transport: Optional[httpx.AsyncBaseTransport] = None,
    ) -> None:
        self.config = Config.make(base_url, token, token_file, actor, timeout)
        self._http = httpx.AsyncClient(
            base_url=self.config.base_url,
            headers=self.config.headers(),
            timeout=timeout,
            transport=transport,
        )
        self.runs = AsyncRuns(self)
        self.templates = AsyncTemplates(self)
        self.tokens = AsyncTokens(self)
        self.webhooks = AsyncWebhooks(self)

    async def _send(self, r: Req) -> Resp:
        try:
            resp = await self._http.request(
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

    async def _run(self, op: Op[T]) -> T:
        try:
            r = next(op)
            while True:
                r = op.send(await self._send(r))
        except StopIteration as done:
            return done.value

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def health(self) -> bool:
        await self._run(_health())
        return True

    async def create(
        self,
        manifest: Optional[Mapping[str, Any]] = None,
        *,
        template: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
    ) -> "AsyncSandbox":
        return AsyncSandbox(self, await self._run(_core.op_create(manifest, template, labels)))

    async def get(self, sandbox_id: str) -> "AsyncSandbox":
        return AsyncSandbox(self, await self._run(_core.op_get(sandbox_id)))

    async def list(self, state: Optional[str] = None) -> list[SandboxInfo]:
        return await self._run(_core.op_list(state))

    async def list_page(
        self,
        *,
        state: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        created_after: Any = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
    ) -> SandboxPage:
        """One page of this tenant's sandboxes (see ``Client.list_page``)."""
        return await self._run(_core.op_list_page(state, labels, created_after, limit, cursor))

    async def restore(
        self, snapshot_id: str, manifest: Optional[Mapping[str, Any]] = None
    ) -> "AsyncSandbox":
        return AsyncSandbox(self, await self._run(_core.op_restore(snapshot_id, manifest)))

    async def images(self) -> list[dict[str, Any]]:
        return await self._run(_core.op_image_list())

    async def image(self, name: str) -> dict[str, Any]:
        return await self._run(_core.op_image_get(name))

    async def delete_image(self, name: str) -> None:
        await self._run(_core.op_image_delete(name))

    async def import_image(self, archive: bytes, name: Optional[str] = None) -> dict[str, Any]:
        return await self._run(_core.op_image_import(archive, name))

    async def snapshots(self) -> list[SnapshotInfo]:
        return await self._run(_core.op_snapshot_list())

    async def snapshot(self, snapshot_id: str) -> SnapshotInfo:
        return await self._run(_core.op_snapshot_get(snapshot_id))

    async def delete_snapshot(self, snapshot_id: str) -> None:
        await self._run(_core.op_snapshot_delete(snapshot_id))


def _health() -> Op[None]:
    yield _core.req("health")
    return None


def _client_of(client: Optional[AsyncClient], kwargs: dict[str, Any]) -> AsyncClient:
    if client is not None:
        if kwargs:
            raise InvalidArgument("give either a client or connection arguments, not both")
        return client
    return AsyncClient(**kwargs)


class AsyncSandbox:
    """A stasis sandbox (async). ``async with`` destroys it on exit."""

    def __init__(self, client: AsyncClient, info: SandboxInfo) -> None:
        self.client = client
        self.info = info
        self.files = AsyncFiles(self)

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def state(self) -> str:
        return self.info.state

    def __repr__(self) -> str:
        return f"AsyncSandbox({self.id!r}, state={self.info.state!r})"

    @classmethod
    async def create(
        cls,
        manifest: Optional[Mapping[str, Any]] = None,
        *,
        template: Optional[str] = None,
        labels: Optional[Mapping[str, str]] = None,
        client: Optional[AsyncClient] = None,
        **connect: Any,
    ) -> "AsyncSandbox":
        return await _client_of(client, connect).create(manifest, template=template, labels=labels)

    @classmethod
    async def from_snapshot(
        cls,
        snapshot_id: str,
        manifest: Optional[Mapping[str, Any]] = None,
        *,
        client: Optional[AsyncClient] = None,
        **connect: Any,
    ) -> "AsyncSandbox":
        return await _client_of(client, connect).restore(snapshot_id, manifest)

    @classmethod
    async def connect(
        cls, sandbox_id: str, *, client: Optional[AsyncClient] = None, **connect: Any
    ) -> "AsyncSandbox":
        return await _client_of(client, connect).get(sandbox_id)

    async def refresh(self) -> SandboxInfo:
        self.info = await self.client._run(_core.op_get(self.id))
        return self.info

    async def pause(self, *, keep_memory: Optional[bool] = None) -> SandboxInfo:
        self.info = await self.client._run(_core.op_pause(self.id, keep_memory))
        return self.info

    async def resume(self) -> SandboxInfo:
        self.info = await self.client._run(_core.op_resume(self.id))
        return self.info

    async def snapshot(self, *, ttl_secs: Optional[int] = None) -> SnapshotInfo:
        return await self.client._run(_core.op_snapshot(self.id, ttl_secs))

    async def fork(self, n: int) -> list["AsyncSandbox"]:
        _, children = await self.client._run(_core.op_fork(self.id, n))
        return [AsyncSandbox(self.client, c) for c in children]

    async def destroy(self) -> SandboxInfo:
        self.info = await self.client._run(_core.op_destroy(self.id))
        return self.info

    async def set_timeout(self, timeout: float) -> SandboxInfo:
        """Destroy the sandbox after ``timeout`` more seconds of running time."""
        secs = int(-(-float(timeout) // 1))
        if secs < 1:
            raise InvalidArgument("timeout must be at least 1 second")
        return await self.set_lifecycle(timeout_secs=secs)

    async def set_lifecycle(self, **change: Any) -> SandboxInfo:
        """Change the lifecycle policy at runtime (see ``Sandbox.set_lifecycle``)."""
        self.info = await self.client._run(_core.op_set_lifecycle(self.id, change))
        return self.info

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.info.state not in ("destroyed", "destroying"):
            await self.destroy()

    async def exec(
        self,
        cmd: Argv,
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        timeout: Optional[float] = None,
        stdin: Union[str, bytes, None] = None,
        on_output: Optional[Callable[[OutputChunk], Union[None, Awaitable[None]]]] = None,
    ) -> ExecResult:
        if on_output is None:
            body = _core.exec_body(cmd, env, cwd, timeout, stdin)
            return await self.client._run(_core.op_exec(self.id, body, timeout))
        stream = self.exec_stream(cmd, env=env, cwd=cwd, timeout=timeout, stdin=stdin)
        async for chunk in stream:
            r = on_output(chunk)
            if r is not None:
                await r
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
    ) -> "AsyncExecStream":
        return AsyncExecStream(self, _core.exec_body(cmd, env, cwd, timeout, stdin), timeout)

    async def session(
        self,
        kind: Union[str, Sequence[str]] = "python",
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
    ) -> "AsyncSession":
        if isinstance(kind, str):
            if kind != "python":
                raise InvalidArgument(f"unknown session kind {kind!r} (give 'python' or an argv)")
            info = await self.client._run(
                _core.op_session_start(self.id, _core.PYTHON_ARGV, env, cwd)
            )
            s = AsyncSession(self, info, python=True)
            s._offset = await self.client._run(_core.op_python_setup(self.id, info.id))
            return s
        info = await self.client._run(_core.op_session_start(self.id, list(kind), env, cwd))
        return AsyncSession(self, info, python=False)

    async def sessions(self) -> list[SessionInfo]:
        return await self.client._run(_core.op_session_list(self.id))

    async def attach_session(
        self, session_id: str, *, python: bool = False, offset: int = 0
    ) -> "AsyncSession":
        for info in await self.sessions():
            if info.id == session_id:
                s = AsyncSession(self, info, python=python)
                s._offset = offset if offset else info.output_end
                return s
        raise NotFound(f"session {session_id} not found in sandbox {self.id}")

    async def pty(
        self,
        cmd: Union[str, Sequence[str], None] = None,
        *,
        cols: int = 80,
        rows: int = 24,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
    ) -> "AsyncPty":
        """Start ``cmd`` on a terminal (see :meth:`stasis_client.Sandbox.pty`)."""
        argv = _core.pty_argv(cmd)
        if argv is None:
            argv = await self.client._run(_core.op_default_shell(self.id))
        info = await self.client._run(
            _core.op_session_start(self.id, argv, env, cwd, (cols, rows))
        )
        return AsyncPty(self, info)

    async def usage(self) -> dict[str, Any]:
        return await self.client._run(_usage(self.id))

    async def port_url(self, port: int, *, ttl: Optional[int] = None) -> PortUrl:
        """See :meth:`stasis_client.Sandbox.port_url`."""
        return await self.client._run(
            _core.op_port_url(self.client.config.base_url, self.id, port, ttl)
        )

    async def revoke_port_urls(self, port: int, url_id: Optional[str] = None) -> None:
        """See :meth:`stasis_client.Sandbox.revoke_port_urls`."""
        await self.client._run(_core.op_port_revoke(self.id, port, url_id))

    async def network(self) -> dict[str, Any]:
        """The network policy in force (``policy.allow``/``policy.deny``) and,
        while the sandbox is attached, its egress counters."""
        return await self.client._run(_core.op_network(self.id))

    async def set_network(
        self, *, allow: Sequence[str] = (), deny: Sequence[str] = ()
    ) -> dict[str, Any]:
        """Replace the network policy (both lists) without a restart: names
        (``pypi.org``), one-label wildcards (``*.pythonhosted.org``),
        addresses and networks (``10.1.0.0/16``), each with an optional
        ``:port``. A bad entry raises ``InvalidManifest`` naming the field."""
        return await self.client._run(_core.op_set_network(self.id, allow, deny))


def _usage(sandbox_id: str) -> Op[dict[str, Any]]:
    resp = yield _core.req("sandbox.usage", ids={"id": sandbox_id})
    return resp.json()


class AsyncExecStream:
    """Async iterator over a streaming exec's output chunks; ``.result`` at the end."""

    def __init__(self, sbx: AsyncSandbox, body: dict[str, Any], timeout: Optional[float]) -> None:
        self._sbx = sbx
        self._body = body
        self._timeout = timeout
        self.result: Optional[ExecResult] = None

    async def __aiter__(self) -> AsyncIterator[OutputChunk]:
        client = self._sbx.client
        r = _core.req("sandbox.exec_stream", ids={"id": self._sbx.id}, json=self._body)
        dec = _core.LineDecoder()
        out: list[bytes] = []
        err: list[bytes] = []
        try:
            async with client._http.stream(
                r.method,
                r.path,
                json=r.json,
                timeout=client.config.timeout + _core.exec_extra_timeout(self._timeout),
            ) as resp:
                if resp.status_code not in r.ok:
                    await resp.aread()
                    _core.check(r, resp.status_code, resp.content)
                async for chunk in resp.aiter_bytes():
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


class AsyncFiles:
    def __init__(self, sbx: AsyncSandbox) -> None:
        self._sbx = sbx

    async def write(
        self,
        path: str,
        data: Union[str, bytes],
        *,
        mode: Optional[int] = None,
        exclusive: bool = False,
    ) -> None:
        await self._sbx.client._run(_core.op_write(self._sbx.id, path, data, mode, exclusive))

    async def read(
        self, path: str, *, offset: Optional[int] = None, length: Optional[int] = None
    ) -> bytes:
        return await self._sbx.client._run(_core.op_read(self._sbx.id, path, offset, length))

    async def stat(self, path: str) -> FileStat:
        return await self._sbx.client._run(_core.op_stat(self._sbx.id, path))

    async def exists(self, path: str) -> bool:
        return await self._sbx.client._run(_core.op_exists(self._sbx.id, path))

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        await self._sbx.client._run(_core.op_remove(self._sbx.id, path, recursive))

    async def mkdir(self, path: str, *, parents: bool = True) -> None:
        await self._sbx.client._run(_core.op_mkdir(self._sbx.id, path, parents))

    async def rename(self, src: str, dst: str) -> None:
        await self._sbx.client._run(_core.op_rename(self._sbx.id, src, dst))

    async def watch(self, path: str = ".") -> AsyncIterator[FileEvent]:
        """Changes under the directory ``path``, until the iteration stops."""
        client = self._sbx.client
        r = _core.req("files.watch", ids={"id": self._sbx.id}, params={"path": path})
        dec = _core.LineDecoder()
        async with client._http.stream(
            r.method,
            r.path,
            params=r.params,
            timeout=httpx.Timeout(client.config.timeout, read=None),
        ) as resp:
            if resp.status_code not in r.ok:
                await resp.aread()
                _core.check(r, resp.status_code, resp.content)
            async for chunk in resp.aiter_bytes():
                for line in dec.feed(chunk):
                    yield FileEvent.from_json(line)

    async def read_text(self, path: str) -> str:
        return (await self.read(path)).decode("utf-8")

    async def list(self, path: str = ".") -> list[FileEntry]:
        return await self._sbx.client._run(_core.op_listdir(self._sbx.id, path))


class AsyncSession:
    def __init__(self, sbx: AsyncSandbox, info: SessionInfo, *, python: bool) -> None:
        self.sandbox = sbx
        self.info = info
        self.python = python
        self._offset = 0

    @property
    def id(self) -> str:
        return self.info.id

    async def run(self, code: str, *, timeout: float = 300.0) -> str:
        if not self.python:
            raise InvalidArgument("run() needs a python session; use send()/read()")
        out, ok, self._offset = await self.sandbox.client._run(
            _core.op_python_run(self.sandbox.id, self.id, self._offset, code, timeout)
        )
        return _core.code_result(out, ok)

    async def send(self, data: Union[str, bytes]) -> None:
        await self.sandbox.client._run(_core.op_session_send(self.sandbox.id, self.id, data))

    async def read(self, *, offset: Optional[int] = None, wait_ms: int = 0) -> SessionOutput:
        out = await self.sandbox.client._run(
            _core.op_session_read(
                self.sandbox.id, self.id, self._offset if offset is None else offset, wait_ms
            )
        )
        self._offset = out.next_offset
        return out

    async def kill(self, signal: Optional[str] = None) -> None:
        """Send ``signal`` (``INT``, ``TERM``, ``HUP``, ...; default ``KILL``:
        the whole process tree). The session's output and exit status stay
        readable after it ended."""
        await self.sandbox.client._run(_core.op_session_kill(self.sandbox.id, self.id, signal))


class AsyncTokens:
    """This tenant's API tokens, as :class:`stasis_client.client.Tokens`."""

    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def create(
        self,
        name: str,
        *,
        scopes: Optional[Sequence[str]] = None,
        ttl_secs: Optional[int] = None,
        sandbox: Optional[str] = None,
    ) -> dict[str, Any]:
        return await self._c._run(_core.op_token_create(name, scopes, ttl_secs, sandbox))

    async def list(self) -> list[dict[str, Any]]:
        return await self._c._run(_core.op_token_list())

    async def revoke(self, token_id: str) -> dict[str, Any]:
        return await self._c._run(_core.op_token_revoke(token_id))

    async def rotate(self, token_id: str, *, overlap_secs: Optional[int] = None) -> dict[str, Any]:
        return await self._c._run(_core.op_token_rotate(token_id, overlap_secs))


class AsyncWebhooks:
    """Signed lifecycle webhooks, as :class:`stasis_client.client.Webhooks`."""

    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def create(self, url: str, *, events: Optional[Sequence[str]] = None) -> dict[str, Any]:
        return await self._c._run(_core.op_webhook_create(url, events))

    async def list(self) -> list[dict[str, Any]]:
        return await self._c._run(_core.op_webhook_list())

    async def delete(self, webhook_id: str) -> None:
        await self._c._run(_core.op_webhook_delete(webhook_id))

    async def dead_letters(self, webhook_id: str) -> list[dict[str, Any]]:
        return await self._c._run(_core.op_webhook_dead_letters(webhook_id))


class AsyncTemplates:
    """Templates (``client.templates``), as :class:`stasis_client.client.Templates`."""

    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def create(self, name: str, from_sandbox: Union[str, AsyncSandbox]) -> TemplateInfo:
        sid = from_sandbox.id if isinstance(from_sandbox, AsyncSandbox) else from_sandbox
        return await self._c._run(_core.op_template_create(name, sid))

    async def list(self) -> list[TemplateInfo]:
        return await self._c._run(_core.op_template_list())

    async def get(self, name: str) -> list[TemplateInfo]:
        return await self._c._run(_core.op_template_get(name))

    async def delete(self, reference: str) -> list[TemplateInfo]:
        return await self._c._run(_core.op_template_delete(reference))


class AsyncPty:
    """A command on a terminal in a sandbox (see :class:`stasis_client.Pty`)."""

    def __init__(self, sbx: AsyncSandbox, info: SessionInfo) -> None:
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
        return self._offset

    @property
    def ended(self) -> bool:
        return self._ended

    async def write(self, data: Union[str, bytes]) -> None:
        await self.sandbox.client._run(_core.op_session_send(self.sandbox.id, self.id, data))

    async def read(self, timeout: float = 1.0) -> bytes:
        out = await self.sandbox.client._run(
            _core.op_session_read(self.sandbox.id, self.id, self._offset, int(timeout * 1000))
        )
        self._offset = out.next_offset
        if not out.running and not out.data:
            self._ended = True
            self.exit_code = out.exit_code
        return out.data

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while not self._ended:
            data = await self.read(timeout=10.0)
            if data:
                yield data

    async def resize(self, cols: int, rows: int) -> None:
        await self.sandbox.client._run(
            _core.op_session_resize(self.sandbox.id, self.id, cols, rows)
        )
        self.info.pty = (cols, rows)

    async def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        from .errors import Timeout

        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            left = 10.0 if deadline is None else min(10.0, deadline - loop.time())
            if left <= 0:
                raise Timeout(f"terminal session {self.id} still running", code="timeout")
            out = await self.sandbox.client._run(
                _core.op_session_read(self.sandbox.id, self.id, _core.PAST_END, int(left * 1000))
            )
            if not out.running:
                self.exit_code = out.exit_code
                return out.exit_code

    async def signal(self, name: str) -> None:
        """Send a signal (``INT``, ``TERM``, ``HUP``, ...) to the command and
        its process group; it may handle it. ``INT`` is how a ^C reaches a
        command that has no terminal."""
        await self.sandbox.client._run(_core.op_session_kill(self.sandbox.id, self.id, name))

    async def close(self) -> None:
        from .errors import InvalidState

        if not self._ended:
            try:
                await self.sandbox.client._run(_core.op_session_kill(self.sandbox.id, self.id))
            except (InvalidState, NotFound):
                pass

    async def __aenter__(self) -> "AsyncPty":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class AsyncRuns:
    def __init__(self, client: AsyncClient) -> None:
        self._c = client

    async def create(self, sandbox: Union[str, AsyncSandbox, None] = None) -> "AsyncRun":
        sid = sandbox.id if isinstance(sandbox, AsyncSandbox) else sandbox
        return AsyncRun(self._c, await self._c._run(_core.op_run_create(sid)))

    async def get(self, run_id: str) -> "AsyncRun":
        return AsyncRun(self._c, await self._c._run(_core.op_run_get(run_id)))

    async def list(self) -> list[dict[str, Any]]:
        return await self._c._run(_core.op_run_list())

    async def resume(
        self, document: Mapping[str, Any], *, sandbox: Union[str, AsyncSandbox, None] = None
    ) -> ResumeReport:
        sid = sandbox.id if isinstance(sandbox, AsyncSandbox) else sandbox
        return await self._c._run(_core.op_run_resume(document, sid))


class AsyncRun:
    def __init__(self, client: AsyncClient, data: dict[str, Any]) -> None:
        self._c = client
        self.data = data

    @property
    def id(self) -> str:
        return str(self.data["id"])

    @property
    def status(self) -> str:
        return str(self.data["status"])

    async def refresh(self) -> "AsyncRun":
        self.data = await self._c._run(_core.op_run_get(self.id))
        return self

    async def step(self, kind: str, data: Any = None) -> "AsyncRun":
        self.data = await self._c._run(_core.op_run_step(self.id, kind, data))
        return self

    async def call(
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
        o = await self._c._run(
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

    async def approve(self, call: str, reason: str = "") -> CallOutcome:
        o = await self._c._run(_core.op_run_decide(self.id, call, True, reason))
        self.data = o.run
        return o

    async def reject(self, call: str, reason: str = "") -> CallOutcome:
        o = await self._c._run(_core.op_run_decide(self.id, call, False, reason))
        self.data = o.run
        return o

    async def state(self) -> dict[str, Any]:
        return await self._c._run(_core.op_run_state(self.id))
