"""The SDK's bounded-read tests (tests/sandbox/test_bounded_read.py) that apply
to a provider, run on the stasis provider."""

from __future__ import annotations

from unittest.mock import AsyncMock

import pytest

from agents.sandbox.errors import WorkspaceReadNotFoundError

pytestmark = pytest.mark.asyncio

DATA = b"\x00\xffabcdefghijk"


@pytest.mark.parametrize("limit", [1, 5, 100])
async def test_bounded_provider_read_closes_at_prefix(box, limit: int) -> None:
    box.write_bytes(box / "out.jsonl", DATA)
    session = await box.session(box.dir)
    assert await session.read_bounded("out.jsonl", max_bytes=limit) == DATA[:limit]


async def test_bounded_http_read_missing_file_closes_without_body(box) -> None:
    session = await box.session(box.dir)
    with pytest.raises(WorkspaceReadNotFoundError):
        await session.read_bounded("out.jsonl", max_bytes=5)


async def test_native_bounded_read_needs_no_process(box) -> None:
    box.write_bytes(box / "out.jsonl", b"\x00\xffbinary data")
    session = await box.session(box.dir)
    session.exec = AsyncMock(side_effect=AssertionError("No process required"))
    assert await session.read_bounded("out.jsonl", max_bytes=4) == b"\x00\xffbi"
    with pytest.raises(WorkspaceReadNotFoundError):
        await session.read_bounded("missing", max_bytes=4)
    with pytest.raises(ValueError):
        await session.read_bounded("out.jsonl", max_bytes=0)
