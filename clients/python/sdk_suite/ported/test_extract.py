"""The SDK's extract / archive tests on a started session (tests/sandbox/test_extract.py),
run on the stasis provider: ``_build_session(tmp_path)`` becomes a session on a
fresh ``workspace`` directory in the sandbox; the assertions are upstream's."""

from __future__ import annotations

import io
import tarfile
import zipfile

import pytest

from agents.sandbox.errors import InvalidManifestPathError, WorkspaceArchiveWriteError
from agents.sandbox import SandboxArchiveLimits

pytestmark = pytest.mark.asyncio


def _tar_bytes(*, members: dict[str, bytes]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as archive:
        for name, payload in members.items():
            info = tarfile.TarInfo(name=name)
            info.size = len(payload)
            archive.addfile(info, io.BytesIO(payload))
    buf.seek(0)
    return buf


def _zip_bytes(*, members: dict[str, bytes]) -> io.BytesIO:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, mode="w") as archive:
        for name, payload in members.items():
            archive.writestr(name, payload)
    buf.seek(0)
    return buf


class _ChunkedBinaryStream(io.IOBase):
    """A non-seekable stream handing out its bytes in the given chunks."""

    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = list(chunks)

    def read(self, size: int = -1) -> bytes:
        if size < 0:
            data = b"".join(self._chunks)
            self._chunks.clear()
            return data
        out = bytearray()
        while len(out) < size and self._chunks:
            take = self._chunks[0][: size - len(out)]
            out.extend(take)
            rest = self._chunks[0][len(take) :]
            if rest:
                self._chunks[0] = rest
            else:
                self._chunks.pop(0)
        return bytes(out)


async def _workspace_session(box):
    workspace = box / "workspace"
    box.mkdir(workspace)
    return workspace, await box.session(workspace)


NO_LIMITS = dict(max_input_bytes=None, max_extracted_bytes=None, max_members=None)


async def _rejects_member(box, name: str, data, *, member: str, reason: str):
    workspace, session = await _workspace_session(box)
    with pytest.raises(WorkspaceArchiveWriteError) as exc_info:
        await session.extract(name, data)
    assert exc_info.value.context["member"] == member
    assert exc_info.value.context["reason"] == reason
    return workspace


async def test_extract_tar_writes_archive_and_unpacks_contents(box) -> None:
    workspace, session = await _workspace_session(box)
    await session.extract("bundle.tar", _tar_bytes(members={"nested/hello.txt": b"hello from tar"}))
    assert box.test(f"-f {workspace / 'bundle.tar'}")
    assert box.read_bytes(workspace / "nested/hello.txt") == b"hello from tar"


async def test_extract_zip_writes_archive_and_unpacks_contents(box) -> None:
    workspace, session = await _workspace_session(box)
    await session.extract("bundle.zip", _zip_bytes(members={"nested/hello.txt": b"hello from zip"}))
    assert box.test(f"-f {workspace / 'bundle.zip'}")
    assert box.read_bytes(workspace / "nested/hello.txt") == b"hello from zip"


async def test_extract_default_archive_limits_none_preserves_no_resource_limit_behavior(box) -> None:
    workspace, session = await _workspace_session(box)
    await session.extract("bundle.tar", _tar_bytes(members={"one.txt": b"1", "two.txt": b"2"}))
    assert box.read_bytes(workspace / "one.txt") == b"1"
    assert box.read_bytes(workspace / "two.txt") == b"2"


async def test_extract_rejects_archive_input_over_limit(box) -> None:
    workspace, session = await _workspace_session(box)
    with pytest.raises(WorkspaceArchiveWriteError) as exc_info:
        await session.extract(
            "bundle.zip",
            _ChunkedBinaryStream([b"123", b"45"]),
            archive_limits=SandboxArchiveLimits(**{**NO_LIMITS, "max_input_bytes": 4}),
        )
    assert exc_info.value.context["reason"] == "archive input size exceeds limit"
    assert exc_info.value.context["limit"] == 4
    assert exc_info.value.context["actual"] == 5
    assert not box.exists(workspace / "bundle.zip")


@pytest.mark.parametrize("kind", ["tar", "zip"])
async def test_extract_rejects_extracted_bytes_over_limit(box, kind: str) -> None:
    workspace, session = await _workspace_session(box)
    data = (_tar_bytes if kind == "tar" else _zip_bytes)(members={"large.txt": b"12345"})
    with pytest.raises(WorkspaceArchiveWriteError) as exc_info:
        await session.extract(
            f"bundle.{kind}",
            data,
            archive_limits=SandboxArchiveLimits(**{**NO_LIMITS, "max_extracted_bytes": 4}),
        )
    assert exc_info.value.context["member"] == "large.txt"
    assert exc_info.value.context["reason"] == "archive extracted size exceeds limit"
    assert exc_info.value.context["limit"] == 4
    assert exc_info.value.context["actual"] == 5
    assert not box.exists(workspace / "large.txt")


@pytest.mark.parametrize("kind", ["tar", "zip"])
async def test_extract_rejects_member_count_over_limit(box, kind: str, monkeypatch) -> None:
    data = (_tar_bytes if kind == "tar" else _zip_bytes)(members={"one.txt": b"1", "two.txt": b"2"})
    if kind == "tar":

        def fail_getmembers(_self: tarfile.TarFile) -> list[tarfile.TarInfo]:
            raise AssertionError("tar extraction should not materialize all members")

        monkeypatch.setattr(tarfile.TarFile, "getmembers", fail_getmembers)
    workspace, session = await _workspace_session(box)
    with pytest.raises(WorkspaceArchiveWriteError) as exc_info:
        await session.extract(
            f"bundle.{kind}",
            data,
            archive_limits=SandboxArchiveLimits(**{**NO_LIMITS, "max_members": 1}),
        )
    assert exc_info.value.context["member"] == "two.txt"
    assert exc_info.value.context["reason"] == "archive member count exceeds limit"
    assert exc_info.value.context["limit"] == 1
    assert exc_info.value.context["actual"] == 2
    assert not box.exists(workspace / "one.txt")
    assert not box.exists(workspace / "two.txt")


async def test_extract_archive_limits_none_disables_only_selected_limits(box) -> None:
    workspace, session = await _workspace_session(box)
    await session.extract(
        "bundle.tar",
        _tar_bytes(members={"large.txt": b"12345"}),
        archive_limits=SandboxArchiveLimits(**{**NO_LIMITS, "max_members": 1}),
    )
    assert box.read_bytes(workspace / "large.txt") == b"12345"


async def test_extract_archive_limits_per_call_override_session_default(box) -> None:
    workspace, session = await _workspace_session(box)
    session._set_archive_limits(SandboxArchiveLimits(**{**NO_LIMITS, "max_members": 1}))
    await session.extract(
        "bundle.tar",
        _tar_bytes(members={"one.txt": b"1", "two.txt": b"2"}),
        archive_limits=SandboxArchiveLimits(**{**NO_LIMITS, "max_members": 2}),
    )
    assert box.read_bytes(workspace / "one.txt") == b"1"
    assert box.read_bytes(workspace / "two.txt") == b"2"


async def test_extract_uses_session_default_archive_limits(box) -> None:
    _, session = await _workspace_session(box)
    session._set_archive_limits(SandboxArchiveLimits(**{**NO_LIMITS, "max_members": 1}))
    with pytest.raises(WorkspaceArchiveWriteError) as exc_info:
        await session.extract("bundle.tar", _tar_bytes(members={"one.txt": b"1", "two.txt": b"2"}))
    assert exc_info.value.context["member"] == "two.txt"
    assert exc_info.value.context["reason"] == "archive member count exceeds limit"
    assert exc_info.value.context["limit"] == 1
    assert exc_info.value.context["actual"] == 2


async def test_extract_archive_limits_object_with_all_none_overrides_session_default(box) -> None:
    workspace, session = await _workspace_session(box)
    session._set_archive_limits(SandboxArchiveLimits(**{**NO_LIMITS, "max_members": 1}))
    await session.extract(
        "bundle.tar",
        _tar_bytes(members={"one.txt": b"1", "two.txt": b"2"}),
        archive_limits=SandboxArchiveLimits(**NO_LIMITS),
    )
    assert box.read_bytes(workspace / "one.txt") == b"1"
    assert box.read_bytes(workspace / "two.txt") == b"2"


async def test_extract_rejects_invalid_per_call_archive_limits(box) -> None:
    limits = SandboxArchiveLimits(max_input_bytes=1)
    limits.max_input_bytes = 0
    _, session = await _workspace_session(box)
    with pytest.raises(ValueError) as exc_info:
        await session.extract("bundle.tar", _tar_bytes(members={"one.txt": b"1"}), archive_limits=limits)
    assert str(exc_info.value) == "archive_limits.max_input_bytes must be at least 1"


async def test_write_accepts_chunked_non_seekable_binary_stream(box) -> None:
    workspace, session = await _workspace_session(box)
    await session.write("streamed.bin", _ChunkedBinaryStream([b"hello ", b"from ", b"stream"]))
    assert box.read_bytes(workspace / "streamed.bin") == b"hello from stream"


@pytest.mark.parametrize("kind", ["tar", "zip"])
async def test_extract_rejects_symlinked_parent_paths(box, kind: str) -> None:
    workspace, session = await _workspace_session(box)
    outside = box / "outside"
    box.mkdir(outside)
    box.symlink(workspace / "link", outside)
    data = (_tar_bytes if kind == "tar" else _zip_bytes)(members={"link/hello.txt": b"hello"})
    with pytest.raises(WorkspaceArchiveWriteError) as exc_info:
        await session.extract(f"bundle.{kind}", data)
    assert exc_info.value.context["member"] == "link/hello.txt"
    assert exc_info.value.context["reason"] == "symlink in parent path: link"
    assert not box.exists(outside / "hello.txt")


async def test_hydrate_workspace_rejects_external_symlink_targets(box) -> None:
    workspace, session = await _workspace_session(box)
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        info = tarfile.TarInfo(name="leak")
        info.type = tarfile.SYMTYPE
        info.linkname = "/etc/passwd"
        tar.addfile(info)
    archive.seek(0)
    with pytest.raises(WorkspaceArchiveWriteError) as exc_info:
        await session.hydrate_workspace(archive)
    assert exc_info.value.context["member"] == "leak"
    assert exc_info.value.context["reason"] == "absolute symlink target not allowed: /etc/passwd"
    assert not box.exists(workspace / "leak")


@pytest.mark.parametrize(
    ("name", "member", "reason"),
    [
        ("bundle.tar", "C:/tmp/evil.txt", "windows drive path"),
        ("bundle.zip", r"C:\tmp\evil.txt", "windows drive path"),
        ("bundle.tar", r"..\evil.txt", "windows path separator"),
        ("bundle.zip", r"\evil.txt", "windows path separator"),
    ],
)
async def test_extract_rejects_windows_member_paths(box, name: str, member: str, reason: str) -> None:
    data = (_tar_bytes if name.endswith(".tar") else _zip_bytes)(members={member: b"evil"})
    await _rejects_member(box, name, data, member=member, reason=reason)


@pytest.mark.parametrize("kind", ["tar", "zip"])
async def test_extract_rejects_member_under_non_directory_member(box, kind: str) -> None:
    data = (_tar_bytes if kind == "tar" else _zip_bytes)(
        members={"nested/hello.txt": b"hello", "nested": b"not a directory"}
    )
    workspace = await _rejects_member(
        box,
        f"bundle.{kind}",
        data,
        member="nested/hello.txt",
        reason="archive path descends through non-directory: nested",
    )
    assert not box.exists(workspace / "nested")


async def test_helpers_reject_paths_outside_workspace_root(box) -> None:
    _, session = await _workspace_session(box)
    with pytest.raises(InvalidManifestPathError, match="must not escape root"):
        await session.ls("../outside")
    with pytest.raises(InvalidManifestPathError, match="must not escape root"):
        await session.mkdir("../outside", parents=True)
    with pytest.raises(InvalidManifestPathError, match="must not escape root"):
        await session.rm("../outside")
    with pytest.raises(InvalidManifestPathError, match="must be relative"):
        await session.extract("/tmp/bundle.tar", _tar_bytes(members={"a.txt": b"a"}))


async def test_helpers_reject_symlink_escape_paths(box) -> None:
    workspace, session = await _workspace_session(box)
    outside = box / "outside"
    box.mkdir(outside)
    box.symlink(workspace / "link", outside)
    with pytest.raises(InvalidManifestPathError, match="must not escape root"):
        await session.mkdir("link/nested", parents=True)
    with pytest.raises(InvalidManifestPathError, match="must not escape root"):
        await session.ls("link")
