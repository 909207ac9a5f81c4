"""The SDK's recursive-removal tests (tests/sandbox/test_recursive_removal_compatibility.py),
run on the stasis provider (upstream's "remote" backend case: the real resolver and rm
on a disposable tree); the trees, calls and assertions are upstream's."""

from __future__ import annotations

from pathlib import PurePosixPath

import pytest

from agents.sandbox import Manifest, SandboxPathGrant
from agents.sandbox.errors import ExecNonZeroError, WorkspaceArchiveWriteError
from agents.sandbox.session import SandboxSession

pytestmark = pytest.mark.asyncio


async def _removal_session(box, manifest: Manifest) -> SandboxSession:
    return SandboxSession(
        await box.session(PurePosixPath(manifest.root), grants=tuple(manifest.extra_path_grants))
    )


@pytest.mark.parametrize("alias", ["none", "ancestor", "grant"])
async def test_recursive_remove_preserves_nested_read_only_grant(box, alias: str) -> None:
    workspace = box / "workspace"
    box.mkdir(workspace)
    external = box / "external"
    target = external / "tree"
    protected = target / "protected"
    box.mkdir(protected)
    sentinel = protected / "config"
    box.write_bytes(sentinel, b"protected")
    writable = target / "writable"
    box.mkdir(writable)
    sibling = writable / "data"
    box.write_bytes(sibling, b"allowed")
    grant_path = protected
    remove_path = target
    if alias == "ancestor":
        link = workspace / "link"
        box.symlink(link, external)
        remove_path = link / "tree"
    elif alias == "grant":
        grant_path = box / "protected-alias"
        box.symlink(grant_path, protected)
    session = await _removal_session(
        box,
        Manifest(
            root=str(workspace),
            extra_path_grants=(
                SandboxPathGrant(path=str(external)),
                SandboxPathGrant(path=str(grant_path), read_only=True),
            ),
        ),
    )
    with pytest.raises(WorkspaceArchiveWriteError) as direct:
        await session.rm(sentinel)
    assert direct.value.context["reason"] == "read_only_extra_path_grant"
    with pytest.raises((WorkspaceArchiveWriteError, ExecNonZeroError)):
        await session.rm(remove_path)
    assert box.read_bytes(sentinel) == b"protected"
    with pytest.raises(WorkspaceArchiveWriteError) as recursive:
        await session.rm(remove_path, recursive=True)
    assert recursive.value.context["reason"] == "read_only_extra_path_grant"
    assert box.read_bytes(sentinel) == b"protected"
    assert box.read_bytes(sibling) == b"allowed"
    await session.rm(writable, recursive=True)
    assert not box.exists(writable)
    assert box.read_bytes(sentinel) == b"protected"


@pytest.mark.parametrize("precedence", ["workspace", "first-grant", "nested-writable"])
async def test_recursive_remove_preserves_writable_precedence(box, precedence: str) -> None:
    workspace = box / "workspace"
    box.mkdir(workspace)
    external = box / "external"
    target = (workspace if precedence == "workspace" else external) / "tree"
    child = target / "child"
    box.mkdir(child)
    box.write_bytes(child / "data", b"allowed")
    grants: tuple[SandboxPathGrant, ...] = (
        SandboxPathGrant(path=str(external)),
        SandboxPathGrant(path=str(child), read_only=True),
    )
    if precedence == "first-grant":
        grants = (SandboxPathGrant(path=str(child)), *grants)
    elif precedence == "nested-writable":
        grants = (
            SandboxPathGrant(path=str(external), read_only=True),
            SandboxPathGrant(path=str(target)),
        )
    session = await _removal_session(box, Manifest(root=str(workspace), extra_path_grants=grants))
    await session.rm(target, recursive=True)
    assert not box.exists(target)
    assert box.exists(workspace)


async def test_remote_recursive_remove_unlinks_leaf_alias_only(box) -> None:
    workspace = box / "workspace"
    box.mkdir(workspace)
    external = box / "external"
    protected = external / "protected"
    box.mkdir(protected)
    sentinel = protected / "data"
    box.write_bytes(sentinel, b"protected")
    link = workspace / "link"
    box.symlink(link, external)
    session = await _removal_session(
        box,
        Manifest(
            root=str(workspace),
            extra_path_grants=(
                SandboxPathGrant(path=str(external)),
                SandboxPathGrant(path=str(protected), read_only=True),
            ),
        ),
    )
    await session.rm(link, recursive=True)
    assert not box.is_symlink(link)
    assert box.read_bytes(sentinel) == b"protected"
