"""stasis as a sandbox provider of the OpenAI Agents SDK (``openai-agents``).

Tested with openai-agents 0.24.0 (``pip install 'stasis-client[agents]'``)::

    from agents import Runner
    from agents.run import RunConfig
    from agents.sandbox import SandboxAgent, SandboxRunConfig
    from stasis_client.agents_sdk import StasisSandboxClient, StasisSandboxClientOptions

    client = StasisSandboxClient("http://127.0.0.1:7070")
    config = RunConfig(sandbox=SandboxRunConfig(
        client=client,
        options=StasisSandboxClientOptions(manifest={"lifecycle": {"idle_timeout_secs": 30}}),
    ))
    result = await Runner.run(SandboxAgent(name="a", model=...), "task", run_config=config)

How the SDK's sandbox interface maps onto stasis:

* ``BaseSandboxClient``: :class:`StasisSandboxClient`, ``backend_id = "stasis"``.
  ``create()`` returns a session; the stasis sandbox is created when the
  session starts. ``delete()`` *pauses* the sandbox by default (its memory and
  files go into a snapshot, its compute is freed; any later request resumes
  it), because a run that stops for an approval is resumed against the same
  sandbox; ``StasisSandboxClientOptions(on_delete="destroy")`` destroys it
  instead, ``"keep"`` leaves it alone. ``resume(state)`` reattaches to the
  sandbox id in the state; when that sandbox no longer exists (destroyed,
  expired, failed) it restores a new sandbox from the state's stasis snapshot
  and moves the session's stasis run (if any) there.
* ``SandboxSessionState``: :class:`StasisSandboxSessionState` adds the stasis
  sandbox id, the daemon URL, the stasis-specific manifest fields, the
  ``on_delete`` policy and the id of the stasis run used for idempotent tool
  calls. It never holds a token: the client that resumes it brings its own.
* ``Manifest``: ``root`` becomes the stasis manifest's ``workdir``;
  ``entries`` (files, dirs, local files/dirs, git repos) are materialized by
  the SDK itself through this session's exec/read/write; ``environment`` is
  resolved by the SDK and passed with every exec. stasis-only settings
  (``backend``, ``image``, ``resources``, ``lifecycle``, ``network.allow``,
  ``mounts``, ``outputs``, ``secrets``) go in
  ``StasisSandboxClientOptions.manifest``. Not supported: manifest
  ``users``/``groups`` (sandbox processes run as one user; refused with a
  clear error), ``run_as`` users (the SDK's ``sudo -u`` would fail), and the
  SDK's cloud-bucket mounts (stasis sandboxes have no egress unless
  allowlisted; use stasis ``mounts`` for read-only inputs).
* Snapshots: a session gets a :class:`StasisSnapshot` (unless
  ``native_snapshots=False``: the Runner always passes a snapshot spec, its
  default being a local tar file, which stasis replaces). The SDK's
  ``stop()`` (called when a run ends or is interrupted) takes a native stasis
  snapshot (files *and*, on the microVM backend, memory) instead of a tar of
  the workspace, and records its id in the state; resuming without the
  sandbox restores that snapshot. ``StasisSnapshot.persist()/restore()`` with
  a tar stream are not used and refuse (there is no tar to keep). With
  ``native_snapshots=False`` the SDK's snapshot (``LocalSnapshotSpec``, ...) goes through
  the SDK's own tar path, using :meth:`StasisSandboxSession.persist_workspace`
  / :meth:`~StasisSandboxSession.hydrate_workspace`.
* Idempotent side effects: :meth:`StasisSandboxSession.tool_call` runs a
  command as a stasis run tool call with an idempotency key (e.g. the SDK's
  tool ``call_id``): a retry after a crash or a restore returns the recorded
  result instead of running it again.
* Exposed ports (``StasisSandboxClientOptions(exposed_ports=(8000,))``):
  ``resolve_exposed_port(port)`` issues a stasis signed URL for the port
  (``port_url_ttl_secs``, default a day) and returns a local endpoint
  (``127.0.0.1:<ephemeral>``) that relays HTTP and WebSocket connections
  through it, because the SDK's endpoints are ``host:port`` with the server
  at ``/``, while stasis serves ports under ``/p/<token>/`` on the daemon.
  A request through it resumes a paused sandbox. The relays stop when the
  session is deleted.
* PTY sessions: ``supports_pty()`` is True (both backends run commands on a
  terminal), so the SDK offers its ``exec_command``/``write_stdin`` tools:
  :meth:`StasisSandboxSession.pty_exec_start` starts a stasis session (on a
  terminal when ``tty``), :meth:`~StasisSandboxSession.pty_write_stdin`
  types into it; output is collected for the yield time. Such sessions
  survive a pause/resume of the sandbox.
* Commands still running when a run stops (an approval interruption, or the
  run's end): the SDK's ``stop()``/``shutdown()`` would terminate every PTY
  process first. With ``on_delete="pause"`` (default) or ``"keep"`` this
  provider leaves them running instead: the sandbox is paused *with* them
  (``delete()``), they continue when it resumes, and the session state
  records each one (the SDK's process id -> the stasis session and the
  output already read), so ``write_stdin`` from the resumed run, in this
  process or another, reads the output they produced meanwhile and their
  exit code. ``on_delete="destroy"`` terminates them as the SDK does.
"""

from __future__ import annotations

import asyncio
import io
import posixpath
import shlex
import tarfile
import uuid
from pathlib import Path, PurePosixPath
from typing import Any, Literal, Optional, Union

try:
    import agents  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "stasis_client.agents_sdk needs the OpenAI Agents SDK: "
        "pip install 'stasis-client[agents]' (tested with openai-agents==0.24.0)"
    ) from e

from agents.sandbox.errors import (
    ExecNonZeroError,
    InvalidManifestPathError,
    ExecTimeoutError,
    ExecTransportError,
    SnapshotNotRestorableError,
    SnapshotPersistError,
    WorkspaceArchiveReadError,
    WorkspaceArchiveWriteError,
    WorkspaceReadNotFoundError,
)
from agents.sandbox.manifest import Manifest
from agents.sandbox.session.base_sandbox_session import BaseSandboxSession
from agents.sandbox.session.dependencies import Dependencies
from agents.sandbox.session.runtime_helpers import RESOLVE_WORKSPACE_PATH_HELPER
from agents.sandbox.session.pty_types import (
    PtyExecUpdate,
    allocate_pty_process_id,
    clamp_pty_yield_time_ms,
    resolve_pty_write_yield_time_ms,
)
from agents.sandbox.session.manager import Instrumentation
from agents.sandbox.session.sandbox_client import BaseSandboxClient, BaseSandboxClientOptions
from agents.sandbox.session.sandbox_session import SandboxSession
from agents.sandbox.session.sandbox_session_state import SandboxSessionState
from agents.sandbox.session.workspace_payloads import coerce_write_payload
from agents.sandbox.snapshot import SnapshotBase, SnapshotSpec, resolve_snapshot
from agents.sandbox.errors import ExposedPortUnavailableError
from agents.sandbox.types import ExecResult, ExposedPortEndpoint, User
from agents.sandbox.files import FileEntry
from agents.sandbox.util.parse_utils import parse_ls_la
from agents.sandbox.workspace_paths import coerce_posix_path
from agents.sandbox.util.tar_utils import UnsafeTarMemberError, validate_tarfile
from agents.sandbox.util.token_truncation import formatted_truncate_text_with_token_count
from pydantic import BaseModel, Field

from ._core import Argv
from ._port_forward import PortForwarder
from .aio import AsyncClient, AsyncPty, AsyncRun, AsyncSandbox
from .errors import AlreadyExists, InvalidArgument, InvalidState, NotFound, StasisError
from .models import CallOutcome

BACKEND_ID = "stasis"

# Stasis sandbox states in which the sandbox still exists (paused ones resume on use).
_ALIVE = {"creating", "running", "pausing", "paused", "resuming"}


class StasisSandboxClientOptions(BaseSandboxClientOptions):
    """Options for new stasis sandboxes.

    ``manifest``: stasis manifest fields other than ``workdir`` (which is the
    SDK manifest's root): ``backend``, ``image``, ``resources``, ``lifecycle``,
    ``network``, ``mounts``, ``outputs``, ``secrets``, ``env``.
    ``on_delete``: what the SDK's ``delete()`` does: ``pause`` (default),
    ``destroy`` or ``keep``. ``snapshot_on_stop``: take a stasis snapshot when
    the SDK stops the session (needed to rehydrate after the sandbox is gone),
    kept ``snapshot_ttl_secs`` (default: until deleted). ``record_run``: create
    a stasis run with the sandbox, so :meth:`StasisSandboxSession.tool_call`
    keys are recorded from the start and travel in the session state.
    ``native_snapshots``: use stasis snapshots whatever snapshot spec the SDK
    passes (the Runner passes its default local tar snapshot when none is
    configured); False keeps the SDK's spec and its tar path.
    """

    type: Literal["stasis"] = "stasis"
    manifest: dict[str, Any] = Field(default_factory=dict)
    on_delete: Literal["pause", "destroy", "keep"] = "pause"
    snapshot_on_stop: bool = True
    snapshot_ttl_secs: Optional[int] = None
    record_run: bool = True
    native_snapshots: bool = True
    exposed_ports: tuple[int, ...] = ()
    port_url_ttl_secs: int = 24 * 3600


class StasisSnapshot(SnapshotBase):
    """A native stasis snapshot of the session's sandbox (``snapshot_id``: ``snap-...``)."""

    type: Literal["stasis"] = "stasis"
    snapshot_id: Optional[str] = None

    async def persist(self, data: io.IOBase, *, dependencies: Optional[Dependencies] = None) -> None:
        _ = (data, dependencies)
        raise SnapshotPersistError(
            snapshot_id=self.id,
            path=Path("<stasis>"),
            cause=TypeError(
                "a StasisSnapshot is taken natively by StasisSandboxSession, not from a tar stream"
            ),
        )

    async def restore(self, *, dependencies: Optional[Dependencies] = None) -> io.IOBase:
        _ = dependencies
        raise SnapshotNotRestorableError(snapshot_id=self.id, path=Path("<stasis>"))

    async def restorable(self, *, dependencies: Optional[Dependencies] = None) -> bool:
        _ = dependencies
        return self.snapshot_id is not None


class StasisSnapshotSpec(SnapshotSpec):
    type: Literal["stasis"] = "stasis"

    def build(self, snapshot_id: str) -> SnapshotBase:
        return StasisSnapshot(id=snapshot_id)


class StasisPtyRef(BaseModel):
    """A command started by ``exec_command`` that was still running at the
    last update: its stasis session and how much of its output the model
    has seen. Kept in the session state so a resumed run can reach it."""

    session_id: str
    offset: int = 0


class StasisSandboxSessionState(SandboxSessionState):
    type: Literal["stasis"] = "stasis"
    sandbox_id: Optional[str] = None
    base_url: Optional[str] = None
    stasis_manifest: dict[str, Any] = Field(default_factory=dict)
    on_delete: Literal["pause", "destroy", "keep"] = "pause"
    snapshot_on_stop: bool = True
    snapshot_ttl_secs: Optional[int] = None
    record_run: bool = True
    run_id: Optional[str] = None
    port_url_ttl_secs: int = 24 * 3600
    pty_processes: dict[int, StasisPtyRef] = Field(default_factory=dict)


def _exit_code(exit_code: Optional[int], signal: Optional[int]) -> int:
    if exit_code is not None:
        return exit_code
    return 128 + (signal or 9)


class StasisSandboxSession(BaseSandboxSession):
    """An SDK sandbox session backed by one stasis sandbox."""

    state: StasisSandboxSessionState

    def __init__(self, *, state: StasisSandboxSessionState, api: AsyncClient) -> None:
        self.state = state
        self._api = api
        # Local relays of exposed ports, by port.
        self._forwarders: dict[int, tuple[PortForwarder, ExposedPortEndpoint]] = {}
        # How the backend was obtained at start: created, reattached or restored.
        self.origin: Optional[str] = None
        # Live PTY processes by the SDK's process id.
        self._ptys: dict[int, AsyncPty] = {}
        # The workspace root and grants as resolved when the session started.
        self._pinned_roots: Optional[tuple[tuple[PurePosixPath, bool, str], ...]] = None

    # -- backend lifecycle --

    def _stasis_manifest(self) -> dict[str, Any]:
        m = dict(self.state.stasis_manifest)
        m["workdir"] = self.state.manifest.root
        return m

    async def _sandbox(self) -> AsyncSandbox:
        if self.state.sandbox_id is None:
            raise InvalidState("the session has not been started")
        return AsyncSandbox(self._api, await self._api._run(_op_get(self.state.sandbox_id)))

    async def _ensure_backend_started(self) -> None:
        if self.state.sandbox_id is not None:
            try:
                sbx = await self._sandbox()
                alive = sbx.state in _ALIVE
            except NotFound:
                alive = False
            if alive:
                self.origin = "reattached"
                self._set_start_state_preserved(True)
                return
            snap = self.state.snapshot
            if isinstance(snap, StasisSnapshot) and snap.snapshot_id is not None:
                old = self.state.sandbox_id
                sbx = await self._api.restore(snap.snapshot_id, self._stasis_manifest())
                self.state.sandbox_id = sbx.id
                self.origin = "restored"
                self._set_start_state_preserved(True)
                if self.state.run_id is not None:
                    await self._move_run(old, sbx.id)
                return
        sbx = await self._api.create(self._stasis_manifest())
        self.state.sandbox_id = sbx.id
        self.origin = "created"
        if self.state.record_run and self.state.run_id is None:
            self.state.run_id = (await self._api.runs.create(sbx.id)).id
        self._set_start_state_preserved(False)

    async def _move_run(self, old: Optional[str], new: str) -> None:
        assert self.state.run_id is not None
        doc = await self._api._run(_op_run_state(self.state.run_id))
        await self._api.runs.resume(doc, sandbox=new)
        _ = old

    async def _start_workspace(self) -> None:
        self._pinned_roots = None
        if not isinstance(self.state.snapshot, StasisSnapshot) or self.origin == "created":
            # A fresh sandbox gets the manifest applied (or, with an SDK tar
            # snapshot, the SDK's own restore path).
            await super()._start_workspace()
        else:
            # Reattached or restored from its stasis snapshot: the sandbox's files
            # are the session's workspace; only ephemeral manifest entries are redone.
            await self._reapply_ephemeral_manifest_on_resume()
        await self._pin_roots()

    async def _persist_snapshot(self) -> None:
        if not isinstance(self.state.snapshot, StasisSnapshot):
            await super()._persist_snapshot()
            return
        if not self.state.snapshot_on_stop or self.state.sandbox_id is None:
            return
        sbx = await self._sandbox()
        if sbx.state not in _ALIVE:
            return
        # Earlier snapshots are kept: a RunState saved before this stop still
        # names them. ``snapshot_ttl_secs`` lets the store expire them.
        snap = await sbx.snapshot(ttl_secs=self.state.snapshot_ttl_secs)
        self.state.snapshot = StasisSnapshot(id=self.state.snapshot.id, snapshot_id=snap.id)

    async def running(self) -> bool:
        if self.state.sandbox_id is None:
            return False
        try:
            return (await self._sandbox()).state in _ALIVE
        except NotFound:
            return False

    def supports_pty(self) -> bool:
        return True

    # -- PTY processes (the SDK's exec_command / write_stdin tools) --

    async def pty_exec_start(
        self,
        *command: Union[str, Path],
        timeout: Optional[float] = None,
        shell: Union[bool, list[str]] = True,
        user: Union[str, User, None] = None,
        tty: bool = False,
        yield_time_s: Optional[float] = None,
        max_output_tokens: Optional[int] = None,
    ) -> PtyExecUpdate:
        _ = timeout
        if shell is True:
            shell = ["sh", "-c"]
        argv = self._prepare_exec_command(*command, shell=shell, user=user)
        try:
            env = await self.state.manifest.environment.resolve()
            sbx = await self._sandbox()
            if tty:
                p = await sbx.pty(argv, env=env or None)
            else:
                s = await sbx.session(argv, env=env or None)
                p = AsyncPty(sbx, s.info)
        except StasisError as e:
            raise ExecTransportError(command=argv, cause=e) from e
        pid = allocate_pty_process_id(set(self._ptys) | set(self.state.pty_processes))
        self._ptys[pid] = p
        yield_ms = 10_000 if yield_time_s is None else int(yield_time_s * 1000)
        return await self._pty_update(pid, clamp_pty_yield_time_ms(yield_ms), max_output_tokens)

    async def pty_write_stdin(
        self,
        *,
        session_id: int,
        chars: str,
        yield_time_s: Optional[float] = None,
        max_output_tokens: Optional[int] = None,
    ) -> PtyExecUpdate:
        from agents.sandbox.errors import PtySessionNotFoundError

        p = self._ptys.get(session_id) or await self._reattach_pty(session_id)
        if p is None:
            raise PtySessionNotFoundError(session_id=session_id)
        if chars:
            try:
                await p.write(chars)
            except InvalidState:
                pass  # it has exited; the update below reports that
        yield_ms = 250 if yield_time_s is None else int(yield_time_s * 1000)
        wait = resolve_pty_write_yield_time_ms(yield_time_ms=yield_ms, input_empty=chars == "")
        return await self._pty_update(session_id, wait, max_output_tokens)

    async def _reattach_pty(self, pid: int) -> Optional[AsyncPty]:
        """A command this session object did not start (the run was resumed
        from its state, e.g. in another process) but the state records."""
        ref = self.state.pty_processes.get(pid)
        if ref is None or self.state.sandbox_id is None:
            return None
        sbx = await self._sandbox()
        for info in await sbx.sessions():
            if info.id == ref.session_id:
                p = AsyncPty(sbx, info)
                p._offset = ref.offset
                self._ptys[pid] = p
                return p
        del self.state.pty_processes[pid]
        return None

    async def pty_terminate_all(self) -> None:
        ptys, self._ptys = list(self._ptys.values()), {}
        self.state.pty_processes.clear()
        for p in ptys:
            try:
                await p.close()
            except StasisError:
                pass

    def _keeps_processes(self) -> bool:
        """Whether the sandbox outlives this run with its processes (paused or
        kept), so commands still running need not be terminated."""
        return self.state.on_delete != "destroy"

    async def _before_stop(self) -> None:
        # The SDK terminates PTY processes before it persists the workspace.
        # A stasis sandbox is paused with its processes (their memory goes into
        # the pause), so work in flight survives a wait for an approval.
        if not self._keeps_processes():
            await super()._before_stop()

    async def _before_shutdown(self) -> None:
        if not self._keeps_processes():
            await super()._before_shutdown()

    async def _pty_update(
        self, pid: int, yield_ms: int, max_output_tokens: Optional[int]
    ) -> PtyExecUpdate:
        """Output of process ``pid`` for up to ``yield_ms`` (less if it exits)."""
        p = self._ptys[pid]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + yield_ms / 1000
        chunks: list[bytes] = []
        while not p.ended:
            left = deadline - loop.time()
            if left <= 0:
                break
            chunks.append(await p.read(timeout=left))
        text, original = formatted_truncate_text_with_token_count(
            b"".join(chunks).decode("utf-8", "replace"), max_output_tokens
        )
        if p.ended:
            del self._ptys[pid]
            self.state.pty_processes.pop(pid, None)
            return PtyExecUpdate(
                process_id=None,
                output=text.encode(),
                exit_code=p.exit_code,
                original_token_count=original,
            )
        self.state.pty_processes[pid] = StasisPtyRef(session_id=p.id, offset=p.offset)
        return PtyExecUpdate(
            process_id=pid, output=text.encode(), exit_code=None, original_token_count=original
        )

    # -- exposed ports --

    async def _resolve_exposed_port(self, port: int) -> ExposedPortEndpoint:
        if port in self._forwarders:
            return self._forwarders[port][1]
        try:
            sbx = await self._sandbox()
            url = await sbx.port_url(port, ttl=self.state.port_url_ttl_secs)
            fwd = PortForwarder(url.url)
            host, local = await fwd.start()
        except (StasisError, ValueError, OSError) as e:
            raise ExposedPortUnavailableError(
                port=port,
                exposed_ports=self.state.exposed_ports,
                reason="backend_unavailable",
                context={"backend": BACKEND_ID, "detail": str(e)},
                cause=e,
            ) from e
        endpoint = ExposedPortEndpoint(host=host, port=local, tls=False)
        self._forwarders[port] = (fwd, endpoint)
        return endpoint

    async def close_port_relays(self) -> None:
        """Stop the local relays of exposed ports (their signed URLs expire on their own)."""
        relays, self._forwarders = self._forwarders, {}
        for fwd, _ in relays.values():
            await fwd.close()

    # -- workspace boundary --

    def _runtime_helpers(self) -> tuple[Any, ...]:
        return (RESOLVE_WORKSPACE_PATH_HELPER,)

    def _current_runtime_helper_cache_key(self) -> object | None:
        # A restored sandbox is a new one: its helpers are installed again.
        return self.state.sandbox_id

    async def _realpath(self, path: PurePosixPath) -> PurePosixPath:
        """``path`` with every symlink resolved, as the sandbox sees it, through
        the files API (its stat does not follow a final symlink and names the
        target): no process runs. A missing tail stays as written."""
        return await _resolve_in_sandbox((await self._sandbox()).files, path)

    async def _authorized_roots(self) -> tuple[tuple[PurePosixPath, bool, str], ...]:
        """The workspace root and the extra path grants, each resolved: pinned
        when the session started, so replacing the root or a grant's alias by
        a symlink afterwards cannot authorize a directory outside."""
        if self._pinned_roots is not None:
            return self._pinned_roots
        return await self._resolve_roots()

    async def _resolve_roots(self) -> tuple[tuple[PurePosixPath, bool, str], ...]:
        policy = self._workspace_path_policy()
        roots = [(await self._realpath(policy.sandbox_root()), False, policy.sandbox_root().as_posix())]
        for grant, read_only in policy.extra_path_grant_rules():
            resolved = await self._realpath(grant)
            if resolved == PurePosixPath("/"):
                raise ValueError(f"extra path grant must not resolve to filesystem root: {grant}")
            roots.append((resolved, read_only, grant.as_posix()))
        return tuple(roots)

    async def _pin_roots(self) -> None:
        self._pinned_roots = None
        self._pinned_roots = await self._resolve_roots()

    async def _validate_path_access(self, path: Union[Path, str], *, for_write: bool = False) -> Path:
        """The SDK's workspace boundary, resolved inside the sandbox (symlinks
        included) without running a process: a path that resolves outside the
        workspace and the grants raises ``InvalidManifestPathError``, a write
        onto a read-only grant ``WorkspaceArchiveWriteError`` (the workspace
        root wins over a grant, the most specific grant over others), as the
        SDK's own resolver does. An absolute path that names the workspace
        through its resolved form (the root being an alias) is accepted."""
        policy = self._workspace_path_policy()
        original = coerce_posix_path(path)
        try:
            workspace_path = policy.normalize_sandbox_path(path, for_write=for_write)
        except InvalidManifestPathError:
            if not original.is_absolute():
                raise
            workspace_path = PurePosixPath(posixpath.normpath(original.as_posix()))
        resolved = await self._realpath(workspace_path)
        roots = await self._authorized_roots()
        root, _, _ = roots[0]
        if not _is_under(resolved, root):
            grants = [g for g in roots[1:] if _is_under(resolved, g[0])]
            if not grants:
                raise InvalidManifestPathError(
                    rel=original.as_posix(),
                    reason="absolute" if original.is_absolute() else "escape_root",
                    context={"resolved_path": resolved.as_posix()},
                )
            _, read_only, grant_path = max(grants, key=lambda g: len(g[0].as_posix()))
            if for_write and read_only:
                raise WorkspaceArchiveWriteError(
                    path=Path(workspace_path.as_posix()),
                    context={
                        "reason": "read_only_extra_path_grant",
                        "grant_path": grant_path,
                        "resolved_path": resolved.as_posix(),
                    },
                )
        return Path(workspace_path.as_posix())

    async def ls(self, path: Union[Path, str], *, user: Union[str, User, None] = None) -> list[FileEntry]:
        """The directory's entries, named under the directory's resolved path
        (a listing through a symlink names where the entries really are)."""
        target = await self._validate_path_access(path)
        resolved = (await self._realpath(PurePosixPath(target.as_posix()))).as_posix()
        cmd = ("ls", "-la", "--", resolved)
        result = await self.exec(*cmd, shell=False, user=user)
        if not result.ok():
            raise ExecNonZeroError(result, command=cmd)
        return parse_ls_la(result.stdout.decode("utf-8", errors="replace"), base=resolved)

    # -- exec and files --

    async def _exec_internal(self, *command: Union[str, Path], timeout: Optional[float] = None) -> ExecResult:
        argv = [str(c) for c in command]
        try:
            env = await self.state.manifest.environment.resolve()
            sbx = await self._sandbox()
            r = await sbx.exec(argv, env=env or None, timeout=timeout)
        except StasisError as e:
            raise ExecTransportError(command=argv, cause=e) from e
        if r.timed_out:
            raise ExecTimeoutError(command=argv, timeout_s=timeout)
        return ExecResult(stdout=r.stdout, stderr=r.stderr, exit_code=_exit_code(r.exit_code, r.signal))

    async def read(self, path: Path, *, user: Union[str, User, None] = None) -> io.IOBase:
        if user is not None:
            await self._check_read_with_exec(path, user=user)
        target = await self._validate_path_access(path)
        try:
            data = await (await self._sandbox()).files.read(target.as_posix())
        except NotFound as e:
            raise WorkspaceReadNotFoundError(path=target, cause=e) from e
        except StasisError as e:
            raise WorkspaceArchiveReadError(path=target, cause=e) from e
        return io.BytesIO(data)

    async def _read_bounded(self, path: Path, *, max_bytes: int) -> bytes:
        """At most ``max_bytes`` from the start of the file: a ranged read,
        so no more than that leaves the sandbox."""
        target = await self._validate_path_access(path)
        try:
            return await (await self._sandbox()).files.read(
                target.as_posix(), offset=0, length=max_bytes
            )
        except NotFound as e:
            raise WorkspaceReadNotFoundError(path=target, cause=e) from e
        except StasisError as e:
            raise WorkspaceArchiveReadError(path=target, cause=e) from e

    async def _write_new_file(
        self, path: Path, data: io.IOBase, *, user: Union[str, User, None] = None
    ) -> None:
        """apply_patch's ``create_file``: a create-exclusive write, so an
        existing file (or symlink) at the name is refused, never overwritten."""
        if user is not None:
            await super()._write_new_file(path, data, user=user)
            return
        payload = coerce_write_payload(path=path, data=data)
        target = await self._validate_path_access(path, for_write=True)
        raw = payload.stream.read()
        if isinstance(raw, str):
            raw = raw.encode()
        try:
            await (await self._sandbox()).files.write(target.as_posix(), raw, exclusive=True)
        except AlreadyExists as e:
            raise FileExistsError(str(target)) from e
        except StasisError as e:
            raise WorkspaceArchiveWriteError(path=target, cause=e) from e

    async def write(self, path: Path, data: io.IOBase, *, user: Union[str, User, None] = None) -> None:
        payload = coerce_write_payload(path=path, data=data)
        target = await self._validate_path_access(path, for_write=True)
        if user is not None:
            await self._check_write_with_exec(target, user=user)
        raw = payload.stream.read()
        if isinstance(raw, str):
            raw = raw.encode()
        try:
            await (await self._sandbox()).files.write(target.as_posix(), raw)
        except StasisError as e:
            raise WorkspaceArchiveWriteError(path=target, cause=e) from e

    # -- native file operations (no shell: the files API) --

    def _failed(self, command: list[str], e: Exception) -> ExecNonZeroError:
        result = ExecResult(stdout=b"", stderr=str(e).encode(), exit_code=1)
        return ExecNonZeroError(result, command=command)

    async def rm(
        self, path: Union[Path, str], *, recursive: bool = False, user: Union[str, User, None] = None
    ) -> None:
        if user is not None:
            await super().rm(path, recursive=recursive, user=user)
            return
        target = await self._validate_path_access(path, for_write=True)
        if recursive and any(g.read_only for g in self.state.manifest.extra_path_grants):
            await self._validate_remote_path_access(target, for_write=True, recursive_remove=True)
        # A leaf symlink is unlinked, never followed: its target may hold a
        # read-only grant the check above did not look into (the SDK's rule
        # for remote backends).
        try:
            await (await self._sandbox()).files.remove(target.as_posix(), recursive=recursive)
        except NotFound as e:
            if not recursive:  # `rm -rf` of nothing succeeds; `rm` fails
                raise self._failed(["rm", "--", target.as_posix()], e) from e
        except StasisError as e:
            raise self._failed(["rm", "--", target.as_posix()], e) from e

    async def mkdir(
        self, path: Union[Path, str], *, parents: bool = False, user: Union[str, User, None] = None
    ) -> None:
        if user is not None:
            await super().mkdir(path, parents=parents, user=user)
            return
        target = await self._validate_path_access(path, for_write=True)
        files = (await self._sandbox()).files
        try:
            await files.mkdir(target.as_posix(), parents=parents)
        except AlreadyExists as e:
            # A directory already there is what was asked for (as the SDK's
            # local provider answers); anything else at the name is an error.
            try:
                is_dir = (await files.stat(target.as_posix())).kind == "dir"
            except StasisError:
                is_dir = False
            if not is_dir:
                raise self._failed(["mkdir", target.as_posix()], e) from e
        except StasisError as e:
            raise self._failed(["mkdir", target.as_posix()], e) from e

    async def mv(
        self,
        source: Union[Path, str],
        destination: Union[Path, str],
        *,
        user: Union[str, User, None] = None,
    ) -> None:
        if user is not None:
            await super().mv(source, destination, user=user)
            return
        src = await self._validate_path_access(source, for_write=True)
        dst = await self._validate_path_access(destination, for_write=True)
        cmd = ["mv", "-fT", "--", src.as_posix(), dst.as_posix()]
        files = (await self._sandbox()).files
        try:
            st = await files.stat(src.as_posix())
            if st.kind not in ("file", "symlink"):
                raise InvalidState("Move source must be a regular file or symlink")
            try:
                if (await files.stat(dst.as_posix())).kind == "dir":
                    raise InvalidState(f"{dst.as_posix()} is a directory")
            except NotFound:
                pass
            await files.rename(src.as_posix(), dst.as_posix())
        except StasisError as e:
            raise self._failed(cmd, e) from e

    async def persist_workspace(self) -> io.IOBase:
        root = self.state.manifest.root
        tmp = f"/tmp/.stasis-workspace-{uuid.uuid4().hex}.tar"
        excludes = " ".join(
            f"--exclude={shlex.quote('./' + p.as_posix())}"
            for p in sorted(self._persist_workspace_skip_relpaths(), key=lambda p: p.as_posix())
        )
        sbx = await self._sandbox()
        try:
            r = await sbx.exec(f"tar -C {shlex.quote(root)} {excludes} -cf {tmp} .")
            if not r.ok:
                raise WorkspaceArchiveReadError(
                    path=Path(root), context={"stderr": r.stderr_text[-2000:]}
                )
            data = await sbx.files.read(tmp)
        except StasisError as e:
            raise WorkspaceArchiveReadError(path=Path(root), cause=e) from e
        finally:
            try:
                await sbx.exec(["rm", "-f", tmp])
            except StasisError:
                pass
        return io.BytesIO(data)

    async def hydrate_workspace(self, data: io.IOBase) -> None:
        root = self.state.manifest.root
        tmp = f"/tmp/.stasis-workspace-{uuid.uuid4().hex}.tar"
        raw = data.read()
        if isinstance(raw, str):
            raw = raw.encode()
        # The SDK's archive rules before anything reaches the sandbox: no
        # absolute or `..` member, nothing under a symlink member, no
        # symlink pointing outside the workspace (e.g. to /etc/passwd).
        try:
            with tarfile.open(fileobj=io.BytesIO(raw), mode="r:*") as tar:
                validate_tarfile(tar, allow_external_symlink_targets=False)
        except UnsafeTarMemberError as e:
            raise WorkspaceArchiveWriteError(
                path=Path(root), context={"reason": e.reason, "member": e.member}, cause=e
            ) from e
        except (tarfile.TarError, OSError) as e:
            raise WorkspaceArchiveWriteError(path=Path(root), cause=e) from e
        sbx = await self._sandbox()
        try:
            await sbx.files.write(tmp, raw)
            r = await sbx.exec(
                f"mkdir -p {shlex.quote(root)} && tar -C {shlex.quote(root)} -xf {tmp}; s=$?; rm -f {tmp}; exit $s"
            )
        except StasisError as e:
            raise WorkspaceArchiveWriteError(path=Path(root), cause=e) from e
        if not r.ok:
            raise WorkspaceArchiveWriteError(path=Path(root), context={"stderr": r.stderr_text[-2000:]})

    # -- stasis extras --

    @property
    def sandbox_id(self) -> Optional[str]:
        return self.state.sandbox_id

    async def stasis_sandbox(self) -> AsyncSandbox:
        """The stasis sandbox behind this session (for pause, fork, sessions, ...)."""
        return await self._sandbox()

    async def run(self) -> AsyncRun:
        """The stasis run that records this session's idempotent tool calls
        (created on first use; its id travels in the session state)."""
        if self.state.run_id is not None:
            return await self._api.runs.get(self.state.run_id)
        run = await self._api.runs.create(self.state.sandbox_id)
        self.state.run_id = run.id
        return run

    async def tool_call(
        self,
        idempotency_key: str,
        cmd: Argv,
        *,
        side_effecting: bool = True,
        timeout: Optional[float] = None,
    ) -> CallOutcome:
        """Run ``cmd`` once per ``idempotency_key``: the intent is recorded before
        it runs and the result after; the same key again returns the recorded
        outcome and runs nothing."""
        run = await self.run()
        return await run.call(idempotency_key, cmd, side_effecting=side_effecting, timeout=timeout)


def _is_under(path: PurePosixPath, root: PurePosixPath) -> bool:
    return path == root or root in path.parents


# Symlinks followed while resolving one path before it is refused (Linux's ELOOP limit).
_MAX_SYMLINKS = 40


async def _resolve_in_sandbox(files: Any, path: PurePosixPath) -> PurePosixPath:
    """Resolve ``path`` (absolute) component by component with lstat-like
    ``files.stat`` calls; the part from the first missing component on is kept
    lexically (normalised), as ``realpath -m`` does."""
    todo = [p for p in path.parts[1:]]
    resolved = PurePosixPath("/")
    hops = 0
    while todo:
        name = todo.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            resolved = resolved.parent
            continue
        candidate = resolved / name
        try:
            st = await files.stat(candidate.as_posix())
        except NotFound:
            rest = PurePosixPath(candidate, *todo) if todo else candidate
            return PurePosixPath(posixpath.normpath(rest.as_posix()))
        except (InvalidState, InvalidArgument):
            # A component that is not a directory (ENOTDIR: the process
            # backend answers invalid_state, the microVM one invalid_argument):
            # nothing below it exists.
            rest = PurePosixPath(candidate, *todo) if todo else candidate
            return PurePosixPath(posixpath.normpath(rest.as_posix()))
        if st.kind == "symlink" and st.symlink_target is not None:
            hops += 1
            if hops > _MAX_SYMLINKS:
                raise InvalidManifestPathError(
                    rel=path.as_posix(), reason="escape_root", context={"reason": "symlink_loop"}
                )
            target = PurePosixPath(st.symlink_target)
            if target.is_absolute():
                resolved = PurePosixPath("/")
                todo = list(target.parts[1:]) + todo
            else:
                todo = list(target.parts) + todo
            continue
        resolved = candidate
    return resolved


def _op_get(sandbox_id: str) -> Any:
    from ._core import op_get

    return op_get(sandbox_id)


def _op_run_state(run_id: str) -> Any:
    from ._core import op_run_state

    return op_run_state(run_id)


class StasisSandboxClient(BaseSandboxClient[Optional[StasisSandboxClientOptions]]):
    """Creates and resumes SDK sandbox sessions backed by stasis sandboxes.

    Connection arguments as for :class:`stasis_client.aio.AsyncClient`
    (``base_url``, ``token`` / ``$STASIS_TOKEN`` / ``token_file``, ...).
    """

    backend_id = BACKEND_ID
    supports_default_options = True

    def __init__(
        self,
        base_url: Optional[str] = None,
        *,
        token: Optional[str] = None,
        token_file: Union[str, Path, None] = None,
        actor: Optional[str] = None,
        timeout: float = 30.0,
        api: Optional[AsyncClient] = None,
        instrumentation: Optional[Instrumentation] = None,
        dependencies: Optional[Dependencies] = None,
    ) -> None:
        self.api = api or AsyncClient(
            base_url, token=token, token_file=token_file, actor=actor, timeout=timeout
        )
        self._instrumentation = instrumentation if instrumentation is not None else Instrumentation()
        self._dependencies = dependencies

    async def create(
        self,
        *,
        snapshot: Union[SnapshotSpec, SnapshotBase, None] = None,
        manifest: Optional[Manifest] = None,
        options: Optional[StasisSandboxClientOptions] = None,
    ) -> SandboxSession:
        opts = options if options is not None else StasisSandboxClientOptions()
        manifest = manifest if manifest is not None else Manifest()
        self._validate_manifest_for_create(manifest)
        _check_manifest(manifest, opts.manifest)
        session_id = uuid.uuid4()
        state = StasisSandboxSessionState(
            session_id=session_id,
            manifest=manifest,
            snapshot=resolve_snapshot(
                StasisSnapshotSpec() if opts.native_snapshots or snapshot is None else snapshot,
                str(session_id),
            ),
            base_url=self.api.config.base_url,
            stasis_manifest=dict(opts.manifest),
            on_delete=opts.on_delete,
            snapshot_on_stop=opts.snapshot_on_stop,
            snapshot_ttl_secs=opts.snapshot_ttl_secs,
            record_run=opts.record_run,
            exposed_ports=opts.exposed_ports,
            port_url_ttl_secs=opts.port_url_ttl_secs,
        )
        inner = StasisSandboxSession(state=state, api=self.api)
        return self._wrap_session(inner, instrumentation=self._instrumentation)

    async def delete(self, session: SandboxSession) -> SandboxSession:
        inner = session._inner
        if not isinstance(inner, StasisSandboxSession):
            raise TypeError("StasisSandboxClient.delete expects a stasis session")
        await inner.close_port_relays()
        sid = inner.state.sandbox_id
        if sid is None or inner.state.on_delete == "keep":
            return session
        try:
            sbx = await self.api.get(sid)
            if inner.state.on_delete == "destroy":
                if sbx.state not in ("destroyed", "destroying"):
                    await sbx.destroy()
            elif sbx.state == "running":
                await sbx.pause()
        except (NotFound, InvalidState):
            pass  # already gone, or already paused / pausing
        return session

    async def resume(self, state: SandboxSessionState) -> SandboxSession:
        if not isinstance(state, StasisSandboxSessionState):
            raise TypeError("StasisSandboxClient.resume expects a StasisSandboxSessionState")
        state.assert_path_grants_rebound()
        inner = StasisSandboxSession(state=state, api=self.api)
        return self._wrap_session(inner, instrumentation=self._instrumentation)

    def deserialize_session_state(self, payload: dict[str, object]) -> SandboxSessionState:
        return self._deserialize_session_state_payload(payload, StasisSandboxSessionState)


def _check_manifest(manifest: Manifest, stasis_manifest: dict[str, Any]) -> None:
    if manifest.users or manifest.groups:
        raise ValueError(
            "stasis sandboxes do not provision manifest users or groups "
            "(every sandbox process runs as the sandbox's one user)"
        )
    for grant in manifest.extra_path_grants:
        if grant.host_path is not None:
            raise ValueError(
                f"stasis does not support path grant host_path for {grant.path!r}: a sandbox "
                "sees no host path (omit host_path, or use stasis mounts)"
            )
    if "workdir" in stasis_manifest:
        raise ValueError(
            "set the workspace with the SDK manifest's root, not the stasis manifest's workdir"
        )


__all__ = [
    "BACKEND_ID",
    "StasisSandboxClient",
    "StasisSandboxClientOptions",
    "StasisSandboxSession",
    "StasisSandboxSessionState",
    "StasisSnapshot",
    "StasisSnapshotSpec",
]
