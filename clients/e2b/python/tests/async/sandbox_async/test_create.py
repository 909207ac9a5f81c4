import asyncio
from typing import Any, cast

import pytest

from e2b import AsyncSandbox, SandboxState
from e2b.exceptions import InvalidArgumentException
from e2b.sandbox.sandbox_api import SandboxQuery
from envd_support import aboot_id


@pytest.mark.skip_debug()
async def test_start(async_sandbox_factory):
    sbx = await async_sandbox_factory(timeout=5)
    assert await sbx.is_running()
    assert sbx._envd_version is not None


@pytest.mark.skip_debug()
async def test_metadata(async_sandbox_factory):
    sbx = await async_sandbox_factory(timeout=5, metadata={"test-key": "test-value"})
    items = await AsyncSandbox.list(query=SandboxQuery(metadata={"test-key": "test-value"})).next_items()
    found = [s for s in items if s.sandbox_id == sbx.sandbox_id]
    assert found, "Sandbox not found"
    assert found[0].metadata is not None
    assert found[0].metadata["test-key"] == "test-value"


@pytest.mark.skip_debug()
async def test_filesystem_only_auto_pause_rejects_auto_resume():
    with pytest.raises(InvalidArgumentException):
        await AsyncSandbox.create(
            timeout=3,
            lifecycle={"on_timeout": {"action": "pause", "keep_memory": False}, "auto_resume": True},
        )


@pytest.mark.skip_debug()
async def test_keep_memory_not_allowed_with_kill():
    with pytest.raises(InvalidArgumentException):
        await AsyncSandbox.create(
            timeout=3,
            lifecycle=cast(Any, {"on_timeout": {"action": "kill", "keep_memory": False}}),
        )


@pytest.mark.skip_debug()
async def test_invalid_on_timeout_type_does_not_crash(async_sandbox_factory):
    sbx = await async_sandbox_factory(timeout=10, lifecycle=cast(Any, {"on_timeout": None}))
    assert await sbx.is_running()


@pytest.mark.skip_debug()
async def test_keep_memory_none_defaults_to_full_memory(async_sandbox_factory):
    sbx = await async_sandbox_factory(
        timeout=60, lifecycle={"on_timeout": {"action": "pause", "keep_memory": None}}
    )
    boot = await aboot_id(sbx)
    await sbx.set_timeout(0)
    for _ in range(150):
        if not await sbx.is_running():
            break
        await asyncio.sleep(0.2)
    assert not await sbx.is_running()
    again = await sbx.connect()
    assert again.sandbox_id == sbx.sandbox_id
    assert await aboot_id(again) == boot


@pytest.mark.skip_debug()
async def test_auto_pause_without_auto_resume_requires_connect(async_sandbox_factory):
    sbx = await async_sandbox_factory(timeout=3, lifecycle={"on_timeout": "pause", "auto_resume": False})
    await asyncio.sleep(5)
    assert (await sbx.get_info()).state == SandboxState.PAUSED
    assert not await sbx.is_running()
    await sbx.connect()
    assert (await sbx.get_info()).state == SandboxState.RUNNING
    assert await sbx.is_running()
