"""Harness of the ported Agents SDK sandbox tests: a real stasis daemon on
loopback (the one ``clients/python/tests`` starts), one sandbox per backend
shared by the tests, and per test a fresh directory in it (``box``) with
helpers that stand in for the host-side ``tmp_path`` operations of the
upstream tests (the workspace lives in the sandbox, not on the host).

``box.session(root, grants=...)`` is the provider construction that replaces
``UnixLocalSandboxSession(state=UnixLocalSandboxSessionState(manifest=...))``:
a started :class:`StasisSandboxSession` on the shared sandbox whose manifest
has that root and those grants.
"""

from __future__ import annotations

import importlib.util
import io
import os
import shlex
import uuid
from pathlib import Path, PurePosixPath
from typing import Any, Iterator, Optional

import pytest

pytest.importorskip("agents")

# The scripted runs need no model key; nothing is traced.
os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")

from agents.sandbox.manifest import Manifest, SandboxPathGrant

from stasis_client import Client
from stasis_client.aio import AsyncClient
from stasis_client.agents_sdk import (
    StasisSandboxSession,
    StasisSandboxSessionState,
    StasisSnapshot,
)

_spec = importlib.util.spec_from_file_location(
    "stasis_client_tests_harness", Path(__file__).resolve().parents[2] / "tests" / "conftest.py"
)
assert _spec is not None and _spec.loader is not None
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)


@pytest.fixture(scope="session")
def daemon() -> Iterator[Any]:
    yield from harness.running_daemon()


@pytest.fixture(scope="session", params=harness.backend_params())
def sandbox_id(request, daemon) -> Iterator[str]:
    with Client(**daemon.connect_kwargs()) as c:
        sbx = c.create(
            {"backend": request.param, "workdir": "/tmp", "lifecycle": {"on_idle": "nothing"}}
        )
        try:
            yield sbx.id
        finally:
            try:
                sbx.destroy()
            except Exception:
                pass


class Box:
    """A fresh directory in the shared sandbox and the host-side helpers."""

    def __init__(self, daemon: Any, sandbox_id: str) -> None:
        self.daemon = daemon
        self.client = Client(**daemon.connect_kwargs())
        self.sbx = self.client.get(sandbox_id)
        self.dir = PurePosixPath(f"/tmp/t-{uuid.uuid4().hex[:10]}")
        self.sh(f"mkdir -p {shlex.quote(str(self.dir))}")
        self.api: Optional[AsyncClient] = None

    def __truediv__(self, name: str) -> PurePosixPath:
        return self.dir / name

    def sh(self, script: str) -> str:
        r = self.sbx.exec(["sh", "-c", script])
        assert r.ok, f"{script}: {r.stderr_text}"
        return r.text

    def test(self, expr: str) -> bool:
        return self.sbx.exec(["sh", "-c", f"test {expr}"]).exit_code == 0

    def mkdir(self, p: PurePosixPath) -> None:
        self.sh(f"mkdir -p {shlex.quote(str(p))}")

    def write_bytes(self, p: PurePosixPath, data: bytes) -> None:
        self.sbx.files.write(str(p), data)

    def read_bytes(self, p: PurePosixPath) -> bytes:
        return self.sbx.files.read(str(p))

    def symlink(self, link: PurePosixPath, target: Any) -> None:
        self.sh(f"ln -s {shlex.quote(str(target))} {shlex.quote(str(link))}")

    def rename(self, a: PurePosixPath, b: PurePosixPath) -> None:
        self.sh(f"mv -T {shlex.quote(str(a))} {shlex.quote(str(b))}")

    def exists(self, p: PurePosixPath) -> bool:
        return self.test(f"-e {shlex.quote(str(p))}")

    def is_symlink(self, p: PurePosixPath) -> bool:
        return self.test(f"-L {shlex.quote(str(p))}")

    def listdir(self, p: PurePosixPath) -> list[str]:
        return sorted(e.name for e in self.sbx.files.list(str(p)))

    async def session(
        self, root: PurePosixPath, *, grants: tuple[SandboxPathGrant, ...] = ()
    ) -> StasisSandboxSession:
        if self.api is None:
            self.api = AsyncClient(**self.daemon.connect_kwargs())
        state = StasisSandboxSessionState(
            session_id=uuid.uuid4(),
            manifest=Manifest(root=str(root), extra_path_grants=grants),
            snapshot=StasisSnapshot(id="ported"),
            sandbox_id=self.sbx.id,
            on_delete="keep",
            record_run=False,
            snapshot_on_stop=False,
        )
        session = StasisSandboxSession(state=state, api=self.api)
        await session.start()
        return session

    async def sdk_session(
        self,
        root: PurePosixPath,
        manifest: Optional[Manifest] = None,
        *,
        exposed_ports: tuple[int, ...] = (),
    ) -> Any:
        """In place of ``await UnixLocalSandboxClient().create(manifest=...)``: the
        SDK's session wrapper around a session on the shared
        sandbox whose workspace root is ``root`` (made here, empty)."""
        from stasis_client.agents_sdk import StasisSandboxClient

        self.mkdir(root)
        if self.api is None:
            self.api = AsyncClient(**self.daemon.connect_kwargs())
        manifest = (manifest or Manifest()).model_copy(update={"root": str(root)})
        state = StasisSandboxSessionState(
            session_id=uuid.uuid4(),
            manifest=manifest,
            snapshot=StasisSnapshot(id="ported"),
            sandbox_id=self.sbx.id,
            on_delete="keep",
            record_run=False,
            snapshot_on_stop=False,
            exposed_ports=exposed_ports,
        )
        session = await StasisSandboxClient(api=self.api).resume(state)
        if manifest.entries:
            # A fresh create materializes the manifest; this session reattaches
            # to the shared sandbox, so its entries are applied here.
            await session.start()
            await session._inner.apply_manifest()
        return session

    async def close(self) -> None:
        if self.api is not None:
            await self.api.aclose()
        try:
            self.sh(f"rm -rf {shlex.quote(str(self.dir))}")
        finally:
            self.client.close()


@pytest.fixture
async def box(daemon, sandbox_id) -> Any:
    b = Box(daemon, sandbox_id)
    try:
        yield b
    finally:
        await b.close()


def stream(data: bytes) -> io.BytesIO:
    return io.BytesIO(data)
