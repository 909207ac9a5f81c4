"""The Agents SDK provider's workspace contract, against a real daemon:
the boundary holds through symlinks (resolved inside the sandbox), archives
are validated before hydration, apply_patch's create_file never overwrites,
bounded reads are ranged, and a write through a symlink to a directory not
made yet makes it."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

pytest.importorskip("agents")

from agents.sandbox import Manifest
from agents.sandbox.errors import (
    ApplyPatchDiffError,
    InvalidManifestPathError,
    WorkspaceArchiveWriteError,
)

from stasis_client.agents_sdk import StasisSandboxClient, StasisSandboxClientOptions

OPTIONS = StasisSandboxClientOptions(
    manifest={"backend": "process", "lifecycle": {"on_idle": "nothing"}},
    on_delete="destroy",
    snapshot_on_stop=False,
    record_run=False,
)


async def _session(daemon, manifest=None):
    provider = StasisSandboxClient(**daemon.connect_kwargs())
    session = await provider.create(manifest=manifest or Manifest(), options=OPTIONS)
    await session.start()
    return provider, session


def _tar(*members: tuple[str, str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for kind, name, payload in members:
            info = tarfile.TarInfo(name)
            if kind == "link":
                info.type = tarfile.SYMTYPE
                info.linkname = payload.decode()
                t.addfile(info)
            else:
                info.size = len(payload)
                t.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


async def test_boundary_through_symlinks(daemon) -> None:
    provider, session = await _session(daemon)
    try:
        r = await session.exec("ln -s /etc out && ln -s /etc/hostname host && mkdir -p in && echo x > in/f")
        assert r.exit_code == 0, r.stderr
        for path in ("out/passwd", "host"):
            with pytest.raises(InvalidManifestPathError):
                await session.read(Path(path))
        with pytest.raises(InvalidManifestPathError):
            await session.write(Path("out/evil"), io.BytesIO(b"x"))
        with pytest.raises(InvalidManifestPathError):
            await session.apply_patch(
                {"type": "create_file", "path": "out/evil2", "diff": "+x\n"}
            )
        # A symlink inside the workspace is fine.
        await session.exec("ln -s in inner")
        assert (await session.read(Path("inner/f"))).read() == b"x\n"
    finally:
        await provider.delete(session)


async def test_write_through_alias_to_missing_dir(daemon) -> None:
    provider, session = await _session(daemon)
    try:
        await session.exec("ln -s /workspace/real alias")
        await session.write(Path("alias/internal/x"), io.BytesIO(b"made"))
        r = await session.exec("cat /workspace/real/internal/x")
        assert r.stdout == b"made"
    finally:
        await provider.delete(session)


async def test_create_file_is_exclusive_and_bounded_reads_are_ranged(daemon) -> None:
    provider, session = await _session(daemon)
    try:
        await session.write(Path("keep.txt"), io.BytesIO(b"original\n"))
        with pytest.raises(ApplyPatchDiffError, match="already exists"):
            await session.apply_patch(
                {"type": "create_file", "path": "keep.txt", "diff": "+replaced\n"}
            )
        assert (await session.read(Path("keep.txt"))).read() == b"original\n"
        await session.apply_patch({"type": "create_file", "path": "new.txt", "diff": "+fresh\n"})
        assert (await session.read(Path("new.txt"))).read() == b"fresh"

        await session.write(Path("big.bin"), io.BytesIO(b"a" * 100_000))
        assert await session.read_bounded(Path("big.bin"), max_bytes=10) == b"a" * 10
    finally:
        await provider.delete(session)


async def test_hydrate_refuses_unsafe_archives(daemon) -> None:
    provider, session = await _session(daemon)
    inner = session._inner
    try:
        for bad in (
            _tar(("link", "passwd", b"/etc/passwd")),
            _tar(("file", "/abs.txt", b"x")),
            _tar(("file", "../up.txt", b"x")),
        ):
            with pytest.raises(WorkspaceArchiveWriteError):
                await inner.hydrate_workspace(io.BytesIO(bad))
        r = await session.exec("ls -a /workspace; test -e /up.txt && echo LEAK || true")
        assert b"passwd" not in r.stdout and b"LEAK" not in r.stdout
        await inner.hydrate_workspace(io.BytesIO(_tar(("file", "ok.txt", b"fine"))))
        assert (await session.read(Path("ok.txt"))).read() == b"fine"
    finally:
        await provider.delete(session)
