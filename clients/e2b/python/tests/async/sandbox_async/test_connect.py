import uuid

import pytest

from e2b import AsyncSandbox


@pytest.mark.skip_debug()
async def test_connect(async_sandbox_factory):
    sbx = await async_sandbox_factory(timeout=10)
    assert await sbx.is_running()
    assert await (await AsyncSandbox.connect(sbx.sandbox_id)).is_running()


@pytest.mark.skip_debug()
async def test_connect_with_secure(async_sandbox_factory):
    name = f"test_directory_{uuid.uuid4()}"
    sbx = await async_sandbox_factory(timeout=10, secure=True)
    assert await sbx.is_running()
    other = await AsyncSandbox.connect(sbx.sandbox_id)
    await other.files.make_dir(name)
    assert len(await other.files.list(name)) == 0


@pytest.mark.skip_debug()
async def test_connect_to_paused_sandbox_resumes(async_sandbox):
    await async_sandbox.pause()
    assert not await async_sandbox.is_running()
    assert await (await AsyncSandbox.connect(async_sandbox.sandbox_id)).is_running()


@pytest.mark.skip_debug()
async def test_resume_does_not_shorten_timeout_on_running_sandbox(async_sandbox_factory):
    sbx = await async_sandbox_factory(timeout=300)
    assert await sbx.is_running()
    before = (await AsyncSandbox.get_info(sbx.sandbox_id)).end_at
    await AsyncSandbox.connect(sbx.sandbox_id, timeout=10)
    after = (await AsyncSandbox.get_info(sbx.sandbox_id)).end_at
    assert after == before, f"Timeout was shortened: before={before}, after={after}"


@pytest.mark.skip_debug()
async def test_connect_extends_timeout_on_running_sandbox(async_sandbox):
    before = (await async_sandbox.get_info()).end_at
    await AsyncSandbox.connect(async_sandbox.sandbox_id, timeout=600)
    after = (await async_sandbox.get_info()).end_at
    assert after > before, f"Timeout was not extended: before={before}, after={after}"
