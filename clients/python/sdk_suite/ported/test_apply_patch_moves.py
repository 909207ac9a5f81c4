"""The SDK's fallback-move tests (tests/sandbox/test_apply_patch.py): upstream
drives ``BaseSandboxSession.mv`` through a real GNU ``mv``; the stasis provider's
move is a rename through the files API, driven here with the same trees and
the same assertions (the directory that appears "after validation" appears
after the provider validated both paths)."""

from __future__ import annotations

import pytest

from agents.sandbox.errors import ExecNonZeroError

pytestmark = pytest.mark.asyncio


async def test_fallback_move_cannot_put_source_inside_a_new_directory(box) -> None:
    source = box / "source"
    destination = box / "destination"
    box.write_bytes(source, b"original")
    session = await box.session(box.dir)
    validate = session._validate_path_access
    calls = 0

    async def validate_then_mkdir(path, *, for_write=False):
        nonlocal calls
        out = await validate(path, for_write=for_write)
        calls += 1
        if calls == 2:
            # The directory arrives after validation but before the actual move.
            box.mkdir(destination)
        return out

    session._validate_path_access = validate_then_mkdir
    with pytest.raises(ExecNonZeroError):
        await session.mv(source, destination)
    assert box.read_bytes(source) == b"original"
    assert box.listdir(destination) == []


async def test_fallback_move_replaces_a_directory_symlink(box) -> None:
    source = box / "source"
    box.write_bytes(source, b"replacement")
    directory = box / "directory"
    box.mkdir(directory)
    link = box / "link"
    box.symlink(link, directory)
    session = await box.session(box.dir)
    await session.mv(source, link)
    assert not box.is_symlink(link)
    assert box.read_bytes(link) == b"replacement"
    assert box.test(f"-d {directory}")
    assert not box.exists(source)
