import pytest

from e2b import AsyncSandbox
from envd_support import aboot_id


@pytest.mark.skip_debug()
async def test_pause_filesystem_only(async_sandbox: AsyncSandbox):
    from conftest import BACKEND

    await async_sandbox.files.write("/home/user/fs-only-marker.txt", "persisted")
    boot = await aboot_id(async_sandbox)
    assert await async_sandbox.pause(keep_memory=False)
    assert not await async_sandbox.is_running()
    again = await async_sandbox.connect()
    assert await again.is_running()
    assert again.sandbox_id == async_sandbox.sandbox_id
    assert (await again.files.read("/home/user/fs-only-marker.txt")).strip() == "persisted"
    if BACKEND == "microvm":
        assert await aboot_id(again) != boot
