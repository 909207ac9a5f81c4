import pytest

from e2b import AsyncSandbox



@pytest.mark.skip_debug()
async def test_create_snapshot(async_sandbox: AsyncSandbox):
    snap = await async_sandbox.create_snapshot()
    assert snap.snapshot_id
    assert len(snap.snapshot_id) > 0
    await AsyncSandbox.delete_snapshot(snap.snapshot_id)


@pytest.mark.skip_debug()
async def test_create_sandbox_from_snapshot(async_sandbox: AsyncSandbox):
    await async_sandbox.files.write("/home/user/test.txt", "content from original sandbox")
    snap = await async_sandbox.create_snapshot()
    try:
        new = await AsyncSandbox.create(snap.snapshot_id)
        try:
            assert await new.files.read("/home/user/test.txt") == "content from original sandbox"
        finally:
            await new.kill()
    finally:
        await AsyncSandbox.delete_snapshot(snap.snapshot_id)


@pytest.mark.skip_debug()
async def test_create_multiple_sandboxes_from_snapshot(async_sandbox: AsyncSandbox):
    await async_sandbox.files.write("/home/user/shared.txt", "shared snapshot content")
    snap = await async_sandbox.create_snapshot()
    try:
        one, two = await AsyncSandbox.create(snap.snapshot_id), await AsyncSandbox.create(snap.snapshot_id)
        try:
            assert await one.files.read("/home/user/shared.txt") == "shared snapshot content"
            assert await two.files.read("/home/user/shared.txt") == "shared snapshot content"
            await one.files.write("/home/user/shared.txt", "modified in sandbox1")
            assert await one.files.read("/home/user/shared.txt") == "modified in sandbox1"
            assert await two.files.read("/home/user/shared.txt") == "shared snapshot content"
        finally:
            await one.kill()
            await two.kill()
    finally:
        await AsyncSandbox.delete_snapshot(snap.snapshot_id)


@pytest.mark.skip_debug()
async def test_list_snapshots(async_sandbox: AsyncSandbox):
    snap = await async_sandbox.create_snapshot()
    try:
        pages = AsyncSandbox.list_snapshots()
        assert pages.has_next
        items = await pages.next_items()
        assert isinstance(items, list)
        assert any(s.snapshot_id == snap.snapshot_id for s in items)
    finally:
        await AsyncSandbox.delete_snapshot(snap.snapshot_id)


@pytest.mark.skip_debug()
async def test_list_snapshots_for_sandbox(async_sandbox: AsyncSandbox):
    snap = await async_sandbox.create_snapshot()
    try:
        items = await AsyncSandbox.list_snapshots(sandbox_id=async_sandbox.sandbox_id).next_items()
        assert any(s.snapshot_id == snap.snapshot_id for s in items)
    finally:
        await AsyncSandbox.delete_snapshot(snap.snapshot_id)


@pytest.mark.skip_debug()
async def test_list_snapshots_filtered_by_name(async_sandbox: AsyncSandbox, sandbox_test_id: str):
    name = f"snap-filter-{sandbox_test_id}"
    snap = await async_sandbox.create_snapshot(name=name)
    try:
        items = await AsyncSandbox.list_snapshots(name=name).next_items()
        assert any(s.snapshot_id == snap.snapshot_id for s in items)
        empty = await AsyncSandbox.list_snapshots(name=f"{name}-does-not-exist").next_items()
        assert isinstance(empty, list)
        assert len(empty) == 0
    finally:
        await AsyncSandbox.delete_snapshot(snap.snapshot_id)


@pytest.mark.skip_debug()
async def test_create_named_snapshot(async_sandbox: AsyncSandbox, sandbox_test_id: str):
    name = f"snap-{sandbox_test_id}"
    snap = await async_sandbox.create_snapshot(name=name)
    try:
        assert snap.snapshot_id
        assert isinstance(snap.names, list)
        assert len(snap.names) > 0
        assert any(name in n for n in snap.names)
    finally:
        await AsyncSandbox.delete_snapshot(snap.snapshot_id)


@pytest.mark.skip_debug()
async def test_delete_snapshot(async_sandbox: AsyncSandbox):
    snap = await async_sandbox.create_snapshot()
    assert (await AsyncSandbox.delete_snapshot(snap.snapshot_id)) is True
    assert (await AsyncSandbox.delete_snapshot(snap.snapshot_id)) is False


@pytest.mark.skip_debug()
async def test_snapshot_preserves_filesystem(async_sandbox: AsyncSandbox):
    app = "/home/user/app"
    await async_sandbox.files.make_dir(app)
    await async_sandbox.files.write(f"{app}/config.json", '{"env": "test"}')
    await async_sandbox.files.write(f"{app}/data.txt", "important data")
    snap = await async_sandbox.create_snapshot()
    try:
        new = await AsyncSandbox.create(snap.snapshot_id)
        try:
            assert await new.files.exists(app)
            assert await new.files.read(f"{app}/config.json") == '{"env": "test"}'
            assert await new.files.read(f"{app}/data.txt") == "important data"
        finally:
            await new.kill()
    finally:
        await AsyncSandbox.delete_snapshot(snap.snapshot_id)


@pytest.mark.skip_debug()
async def test_create_snapshot_class_method(async_sandbox: AsyncSandbox):
    snap = await AsyncSandbox.create_snapshot(async_sandbox.sandbox_id)
    assert snap.snapshot_id
    assert len(snap.snapshot_id) > 0
    await AsyncSandbox.delete_snapshot(snap.snapshot_id)
