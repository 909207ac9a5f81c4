"""The provider's in-sandbox path resolution (no daemon: a fake files API)."""

from __future__ import annotations

from pathlib import PurePosixPath
from types import SimpleNamespace

import pytest

pytest.importorskip("agents")

from agents.sandbox.errors import InvalidManifestPathError

from stasis_client.agents_sdk import _resolve_in_sandbox
from stasis_client.errors import NotFound


class FakeFiles:
    """stat() as the server's: the entry itself, symlinks named with their target."""

    def __init__(self, tree: dict[str, str]) -> None:
        self.tree = tree  # path -> "dir" | "file" | "->target"
        self.calls = 0

    async def stat(self, path: str):
        self.calls += 1
        kind = self.tree.get(path)
        if kind is None:
            raise NotFound(path)
        if kind.startswith("->"):
            return SimpleNamespace(kind="symlink", symlink_target=kind[2:])
        return SimpleNamespace(kind=kind, symlink_target=None)


TREE = {
    "/w": "dir",
    "/w/real": "dir",
    "/w/real/f": "file",
    "/w/inner": "->real",
    "/w/abs": "->/out",
    "/out": "dir",
    "/alias": "->/w",
    "/loop": "->/loop",
    "/w/up": "->../out",
}


@pytest.mark.parametrize(
    ("path", "resolved"),
    [
        ("/w/real/f", "/w/real/f"),
        ("/w/inner/f", "/w/real/f"),
        ("/w/inner/missing/x", "/w/real/missing/x"),
        ("/w/abs/f", "/out/f"),
        ("/alias/inner", "/w/real"),
        ("/w/up/f", "/out/f"),
        ("/w/real/../inner", "/w/real"),
        ("/nothing/here/../x", "/nothing/x"),
        ("/", "/"),
    ],
)
async def test_resolves_every_symlink_and_keeps_a_missing_tail(path: str, resolved: str) -> None:
    assert await _resolve_in_sandbox(FakeFiles(TREE), PurePosixPath(path)) == PurePosixPath(resolved)


async def test_a_symlink_loop_is_refused() -> None:
    with pytest.raises(InvalidManifestPathError):
        await _resolve_in_sandbox(FakeFiles(TREE), PurePosixPath("/loop/x"))
