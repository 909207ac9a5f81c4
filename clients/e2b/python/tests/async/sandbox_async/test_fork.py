import pytest

from e2b import AsyncSandbox
from e2b.exceptions import InvalidArgumentException, SandboxNotFoundException


@pytest.mark.skip_debug()
async def test_fork(async_sandbox: AsyncSandbox):
    await async_sandbox.files.write("/home/user/state.txt", "state before fork")
    forks = await async_sandbox.fork()
    assert len(forks) == 1
    child = forks[0]
    assert isinstance(child, AsyncSandbox)
    try:
        assert child.sandbox_id != async_sandbox.sandbox_id
        assert await async_sandbox.is_running()
        assert await child.is_running()
        assert await child.files.read("/home/user/state.txt") == "state before fork"
        await child.files.write("/home/user/state.txt", "modified in fork")
        assert await async_sandbox.files.read("/home/user/state.txt") == "state before fork"
    finally:
        await child.kill()


@pytest.mark.skip_debug()
async def test_fork_multiple(async_sandbox: AsyncSandbox):
    forks = await async_sandbox.fork(count=2, timeout=60)
    assert len(forks) == 2
    kids = [f for f in forks if isinstance(f, AsyncSandbox)]
    try:
        assert len(kids) == 2
        ids = {k.sandbox_id for k in kids}
        assert len(ids) == 2
        assert async_sandbox.sandbox_id not in ids
        for k in kids:
            assert await k.is_running()
    finally:
        for k in kids:
            await k.kill()


@pytest.mark.skip_debug()
async def test_fork_by_id(async_sandbox: AsyncSandbox):
    forks = await AsyncSandbox.fork(async_sandbox.sandbox_id)
    assert len(forks) == 1
    child = forks[0]
    assert isinstance(child, AsyncSandbox)
    try:
        assert await child.is_running()
    finally:
        await child.kill()


@pytest.mark.skip_debug()
async def test_fork_killed_sandbox(async_sandbox_factory):
    sbx = await async_sandbox_factory()
    await sbx.kill()
    with pytest.raises(SandboxNotFoundException):
        await sbx.fork()


async def test_fork_invalid_count():
    with pytest.raises(InvalidArgumentException):
        await AsyncSandbox.fork("sbx-test", count=0)
