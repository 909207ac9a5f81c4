"""The SDK's descriptor-level file IO tests (tests/sandbox/test_unix_local_file_io.py
and the create-through-the-session cases of test_unix_local.py), run on the stasis
provider: the tree each test builds on the host is built in the sandbox (``box``),
the session is ``box.session(root, grants=...)``; the assertions are upstream's."""

from __future__ import annotations

import pytest

from agents.editor import ApplyPatchOperation
from agents.sandbox.errors import (
    ApplyPatchDiffError,
    ExecNonZeroError,
    InvalidManifestPathError,
    WorkspaceArchiveWriteError,
)
from agents.sandbox.manifest import SandboxPathGrant

from conftest import stream

pytestmark = pytest.mark.asyncio


async def test_safe_symlinks_grants_and_listing_paths_remain_supported(box) -> None:
    workspace = box / "workspace"
    allowed = box / "allowed"
    readonly = box / "readonly"
    for d in (workspace, allowed, readonly):
        box.mkdir(d)
    box.write_bytes(readonly / "file", b"read only")
    alias = box / "alias"
    box.symlink(alias, workspace)
    session = await box.session(
        alias,
        grants=(
            SandboxPathGrant(path=str(allowed)),
            SandboxPathGrant(path=str(readonly), read_only=True),
        ),
    )
    box.symlink(workspace / "internal", workspace / "real")
    box.symlink(workspace / "external", allowed)
    data = stream(b"bytes\x00\xff")
    await session.write("internal/nested/file", data)
    assert not data.closed
    assert box.read_bytes(workspace / "real/nested/file") == b"bytes\x00\xff"
    await session.write("external/file", stream(b"allowed"))
    with await session.read("external/file") as handle:
        assert handle.read() == b"allowed"
    with await session.read(readonly / "file") as handle:
        assert handle.read() == b"read only"
    with pytest.raises(WorkspaceArchiveWriteError):
        await session.write(readonly / "file", stream(b"denied"))
    listed = await session.ls("internal/nested")
    assert [entry.path for entry in listed] == [str(workspace / "real/nested/file")]
    await session.rm("internal", recursive=True)
    # Upstream (UnixLocal) removes the tree the link resolves to; the SDK's rule for
    # remote backends (test_recursive_removal_compatibility.py, ported) unlinks the
    # leaf alias only, and stasis is a remote backend.
    assert not box.is_symlink(workspace / "internal")
    assert box.read_bytes(allowed / "file") == b"allowed"


async def test_root_replacement_cannot_reauthorize_an_outside_directory(box) -> None:
    root = box / "workspace"
    outside = box / "outside"
    box.mkdir(root)
    box.mkdir(outside)
    box.write_bytes(outside / "file", b"original content")
    session = await box.session(root)
    box.rename(root, box / "original")
    box.symlink(root, outside)
    with pytest.raises(InvalidManifestPathError):
        await session.write("file", stream(b"new"))
    assert box.read_bytes(outside / "file") == b"original content"


async def test_open_read_handle_survives_parent_replacement(box) -> None:
    root = box / "workspace"
    outside = box / "outside"
    box.mkdir(root)
    box.mkdir(outside)
    box.write_bytes(root / "file", b"inside")
    box.write_bytes(outside / "file", b"original content")
    session = await box.session(root)
    with await session.read("file") as handle:
        box.rename(root, box / "original")
        box.symlink(root, outside)
        assert handle.read() == b"inside"


async def test_search_only_parent_does_not_require_directory_listing_permission(box) -> None:
    parent = box / "parent"
    box.mkdir(parent)
    box.write_bytes(parent / "file", b"inside")
    session = await box.session(box.dir)
    box.sh(f"chmod 0111 {parent}")
    try:
        with await session.read("parent/file") as handle:
            assert handle.read() == b"inside"
        await session.write("parent/file", stream(b"new"))
        await session.mkdir("parent")
    finally:
        box.sh(f"chmod 0700 {parent}")
    assert box.read_bytes(parent / "file") == b"new"


async def test_replacing_grant_alias_does_not_expand_authority(box) -> None:
    workspace = box / "workspace"
    granted = box / "granted"
    outside = box / "outside"
    for d in (workspace, granted, outside):
        box.mkdir(d)
    box.write_bytes(outside / "file", b"original content")
    alias = box / "alias"
    box.symlink(alias, granted)
    session = await box.session(workspace, grants=(SandboxPathGrant(path=str(alias)),))
    box.sh(f"rm {alias}")
    box.symlink(alias, outside)
    with pytest.raises(InvalidManifestPathError):
        await session.write(alias / "file", stream(b"new"))
    assert box.read_bytes(outside / "file") == b"original content"


async def test_mkdir_existing_directory_does_not_require_search_permission(box) -> None:
    target = box / "locked"
    box.mkdir(target)
    session = await box.session(box.dir)
    box.sh(f"chmod 0 {target}")
    try:
        await session.mkdir("locked")
    finally:
        box.sh(f"chmod 0700 {target}")
    assert box.test(f"-d {target}")


async def test_rename_replaces_the_destination_entry(box) -> None:
    workspace = box / "workspace"
    box.mkdir(workspace)
    box.write_bytes(workspace / "a.txt", b"from a")
    box.write_bytes(workspace / "b.txt", b"from b")
    session = await box.session(workspace)
    await session.mv("a.txt", "b.txt")
    assert box.listdir(workspace) == ["b.txt"]
    assert box.read_bytes(workspace / "b.txt") == b"from a"


async def test_rename_onto_a_directory_fails_and_keeps_the_source(box) -> None:
    workspace = box / "workspace"
    box.mkdir(workspace / "docs")
    box.write_bytes(workspace / "notes.txt", b"kept")
    session = await box.session(workspace)
    with pytest.raises(ExecNonZeroError):
        await session.mv("notes.txt", "docs")
    assert box.read_bytes(workspace / "notes.txt") == b"kept"
    assert box.listdir(workspace / "docs") == []


async def test_same_file_answers_by_entry_identity(box) -> None:
    workspace = box / "workspace"
    box.mkdir(workspace)
    box.write_bytes(workspace / "one.txt", b"one")
    box.write_bytes(workspace / "two.txt", b"two")
    box.sh(f"ln {workspace / 'one.txt'} {workspace / 'hard.txt'}")
    session = await box.session(workspace)
    assert await session.same_file("one.txt", "one.txt") is True
    assert await session.same_file("one.txt", "hard.txt") is True
    assert await session.same_file("one.txt", "two.txt") is False
    assert await session.same_file("one.txt", "missing.txt") is False


async def test_public_entry_operations_preserve_leaf_symlinks(box) -> None:
    from agents.sandbox.session.sandbox_session import SandboxSession

    workspace = box / "workspace"
    box.mkdir(workspace)
    target = workspace / "target"
    box.write_bytes(target, b"untouched")
    link = workspace / "link"
    box.symlink(link, "target")
    box.symlink(workspace / "alias", ".")
    session = SandboxSession(await box.session(workspace))
    assert await session.same_file("link", "target")
    assert not await session.same_file("link", "target", follow_symlinks=False)
    assert not await session.same_file("link", "link", follow_symlinks=False)
    await session.mv("alias/link", "moved")
    assert not box.is_symlink(link)
    assert box.is_symlink(workspace / "moved")
    assert box.read_bytes(target) == b"untouched"
    box.write_bytes(workspace / "replacement", b"replacement")
    await session.mv("replacement", "moved")
    assert not box.is_symlink(workspace / "moved")
    assert box.read_bytes(workspace / "moved") == b"replacement"
    assert box.read_bytes(target) == b"untouched"


@pytest.mark.parametrize("mode", [0o755, 0o600])
async def test_apply_patch_preserves_existing_move_destination(box, mode: int) -> None:
    workspace = box / "workspace"
    box.mkdir(workspace)
    source = workspace / "source"
    destination = workspace / "destination"
    box.write_bytes(source, b"before\n")
    box.write_bytes(destination, b"old destination\n")
    box.sh(f"chmod {mode:o} {destination}")
    before = box.sh(f"stat -c '%i %f' {destination}")
    session = await box.session(workspace)
    await session.apply_patch(
        ApplyPatchOperation(
            type="update_file", path="source", move_to="destination", diff="@@\n-before\n+after\n"
        )
    )
    assert box.read_bytes(destination) == b"after\n"
    assert box.sh(f"stat -c '%i %f' {destination}") == before
    assert not box.exists(source)


async def test_apply_patch_move_under_aliased_workspace_root(box) -> None:
    workspace = box / "workspace"
    box.mkdir(workspace)
    alias = box / "alias"
    box.symlink(alias, workspace)
    source = workspace / "source"
    box.write_bytes(source, b"before\n")
    session = await box.session(alias)
    await session.apply_patch(
        ApplyPatchOperation(
            type="update_file", path="source", move_to="destination", diff="@@\n-before\n+after\n"
        )
    )
    destination = workspace / "destination"
    assert box.read_bytes(destination) == b"after\n"
    assert not box.exists(source)
    assert await session.same_file(destination, "destination", follow_symlinks=False)
    await session.mv(destination, "renamed")
    assert box.read_bytes(workspace / "renamed") == b"after\n"


async def test_entry_operations_honor_exact_file_grants(box) -> None:
    workspace = box / "workspace"
    outside = box / "outside"
    box.mkdir(workspace)
    box.mkdir(outside)
    source = outside / "source"
    destination = outside / "destination"
    readonly = outside / "readonly"
    box.write_bytes(source, b"granted")
    box.write_bytes(readonly, b"read only")
    session = await box.session(
        workspace,
        grants=(
            SandboxPathGrant(path=str(source)),
            SandboxPathGrant(path=str(destination)),
            SandboxPathGrant(path=str(readonly), read_only=True),
        ),
    )
    assert await session.same_file(source, source, follow_symlinks=False)
    with pytest.raises(WorkspaceArchiveWriteError):
        await session.mv(source, readonly)
    with pytest.raises(InvalidManifestPathError):
        await session.mv(source, outside / "ungranted")
    await session.mv(source, destination)
    assert box.read_bytes(destination) == b"granted"
    assert box.read_bytes(readonly) == b"read only"
    assert not box.exists(source)


async def test_move_rejects_directory_sources_through_parent_aliases(box) -> None:
    workspace = box / "workspace"
    shared = box / "shared"
    protected = shared / "tree" / "private"
    box.mkdir(workspace)
    box.mkdir(protected)
    payload = protected / "file"
    box.write_bytes(payload, b"protected")
    box.symlink(workspace / "alias", shared)
    session = await box.session(
        workspace,
        grants=(
            SandboxPathGrant(path=str(shared)),
            SandboxPathGrant(path=str(protected), read_only=True),
        ),
    )
    with pytest.raises(ExecNonZeroError, match="regular file or symlink"):
        await session.mv(workspace / "alias" / "tree", workspace / "moved")
    assert box.read_bytes(payload) == b"protected"
    assert not box.exists(workspace / "moved")


# -- apply_patch create_file through the session (test_unix_local.py) --


async def test_apply_patch_create_through_the_session_rejects_a_dangling_symlink(box) -> None:
    session = await box.session(box.dir)
    box.symlink(box / "link.txt", box / "missing.txt")
    with pytest.raises(ApplyPatchDiffError):
        await session.apply_patch(
            ApplyPatchOperation(type="create_file", path="link.txt", diff="+clobbered\n")
        )
    assert not box.exists(box / "missing.txt")
    assert box.is_symlink(box / "link.txt")


async def test_apply_patch_create_through_the_session_rejects_a_directory(box) -> None:
    session = await box.session(box.dir)
    box.mkdir(box / "adir")
    with pytest.raises(ApplyPatchDiffError):
        await session.apply_patch(
            ApplyPatchOperation(type="create_file", path="adir", diff="+clobbered\n")
        )
    assert box.listdir(box / "adir") == []


async def test_apply_patch_create_through_the_session_keeps_existing_content(box) -> None:
    session = await box.session(box.dir)
    box.write_bytes(box / "notes.txt", b"important\n")
    with pytest.raises(ApplyPatchDiffError):
        await session.apply_patch(
            ApplyPatchOperation(type="create_file", path="notes.txt", diff="+clobbered\n")
        )
    assert box.read_bytes(box / "notes.txt") == b"important\n"


async def test_apply_patch_create_through_the_session_writes_a_new_nested_file(box) -> None:
    session = await box.session(box.dir)
    await session.apply_patch(
        ApplyPatchOperation(type="create_file", path="nested/dir/new.txt", diff="+hello\n")
    )
    assert box.read_bytes(box / "nested/dir/new.txt") == b"hello"
    assert not any(n.startswith(".") for n in box.listdir(box / "nested/dir"))


async def test_apply_patch_create_through_the_session_reports_a_file_parent_as_a_write_error(
    box,
) -> None:
    session = await box.session(box.dir)
    box.write_bytes(box / "parent", b"i am a file\n")
    with pytest.raises(WorkspaceArchiveWriteError):
        await session.apply_patch(
            ApplyPatchOperation(type="create_file", path="parent/child.txt", diff="+hi\n")
        )


async def test_apply_patch_create_accepts_a_destination_at_the_component_limit(box) -> None:
    session = await box.session(box.dir)
    long_name = "a" * 250 + ".txt"
    box.sh(f"echo probe > {box / long_name} && rm {box / long_name}")
    await session.apply_patch(
        ApplyPatchOperation(type="create_file", path=long_name, diff="+hello\n")
    )
    assert box.read_bytes(box / long_name) == b"hello"


async def test_apply_patch_create_supports_a_symlinked_parent(box) -> None:
    session = await box.session(box.dir)
    box.mkdir(box / "real")
    box.symlink(box / "internal", box / "real")
    await session.apply_patch(
        ApplyPatchOperation(type="create_file", path="internal/new.txt", diff="+hello\n")
    )
    assert box.read_bytes(box / "real/new.txt") == b"hello"
    box.symlink(box / "real/dangling.txt", box / "real/missing.txt")
    with pytest.raises(ApplyPatchDiffError):
        await session.apply_patch(
            ApplyPatchOperation(type="create_file", path="internal/dangling.txt", diff="+x\n")
        )
    assert not box.exists(box / "real/missing.txt")
