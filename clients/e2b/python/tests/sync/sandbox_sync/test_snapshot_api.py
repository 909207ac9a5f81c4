import pytest

from e2b import Sandbox



@pytest.mark.skip_debug()
@pytest.mark.microvm
def test_create_snapshot(sandbox: Sandbox):
    snap = sandbox.create_snapshot()
    assert snap.snapshot_id
    assert len(snap.snapshot_id) > 0
    Sandbox.delete_snapshot(snap.snapshot_id)


@pytest.mark.skip_debug()
def test_create_sandbox_from_snapshot(sandbox: Sandbox):
    sandbox.files.write("/home/user/test.txt", "content from original sandbox")
    snap = sandbox.create_snapshot()
    try:
        new = Sandbox.create(snap.snapshot_id)
        try:
            assert new.files.read("/home/user/test.txt") == "content from original sandbox"
        finally:
            new.kill()
    finally:
        Sandbox.delete_snapshot(snap.snapshot_id)


@pytest.mark.skip_debug()
def test_create_multiple_sandboxes_from_snapshot(sandbox: Sandbox):
    sandbox.files.write("/home/user/shared.txt", "shared snapshot content")
    snap = sandbox.create_snapshot()
    try:
        one, two = Sandbox.create(snap.snapshot_id), Sandbox.create(snap.snapshot_id)
        try:
            assert one.files.read("/home/user/shared.txt") == "shared snapshot content"
            assert two.files.read("/home/user/shared.txt") == "shared snapshot content"
            one.files.write("/home/user/shared.txt", "modified in sandbox1")
            assert one.files.read("/home/user/shared.txt") == "modified in sandbox1"
            assert two.files.read("/home/user/shared.txt") == "shared snapshot content"
        finally:
            one.kill()
            two.kill()
    finally:
        Sandbox.delete_snapshot(snap.snapshot_id)


@pytest.mark.skip_debug()
def test_list_snapshots(sandbox: Sandbox):
    snap = sandbox.create_snapshot()
    try:
        pages = Sandbox.list_snapshots()
        assert pages.has_next
        items = pages.next_items()
        assert isinstance(items, list)
        assert any(s.snapshot_id == snap.snapshot_id for s in items)
    finally:
        Sandbox.delete_snapshot(snap.snapshot_id)


@pytest.mark.skip_debug()
def test_list_snapshots_for_sandbox(sandbox: Sandbox):
    snap = sandbox.create_snapshot()
    try:
        items = Sandbox.list_snapshots(sandbox_id=sandbox.sandbox_id).next_items()
        assert any(s.snapshot_id == snap.snapshot_id for s in items)
    finally:
        Sandbox.delete_snapshot(snap.snapshot_id)


@pytest.mark.skip_debug()
def test_list_snapshots_filtered_by_name(sandbox: Sandbox, sandbox_test_id: str):
    name = f"snap-filter-{sandbox_test_id}"
    snap = sandbox.create_snapshot(name=name)
    try:
        items = Sandbox.list_snapshots(name=name).next_items()
        assert any(s.snapshot_id == snap.snapshot_id for s in items)
        empty = Sandbox.list_snapshots(name=f"{name}-does-not-exist").next_items()
        assert isinstance(empty, list)
        assert len(empty) == 0
    finally:
        Sandbox.delete_snapshot(snap.snapshot_id)


@pytest.mark.skip_debug()
def test_create_named_snapshot(sandbox: Sandbox, sandbox_test_id: str):
    name = f"snap-{sandbox_test_id}"
    snap = sandbox.create_snapshot(name=name)
    try:
        assert snap.snapshot_id
        assert isinstance(snap.names, list)
        assert len(snap.names) > 0
        assert any(name in n for n in snap.names)
    finally:
        Sandbox.delete_snapshot(snap.snapshot_id)


@pytest.mark.skip_debug()
def test_delete_snapshot(sandbox: Sandbox):
    snap = sandbox.create_snapshot()
    assert Sandbox.delete_snapshot(snap.snapshot_id) is True
    assert Sandbox.delete_snapshot(snap.snapshot_id) is False


@pytest.mark.skip_debug()
def test_snapshot_preserves_filesystem(sandbox: Sandbox):
    app = "/home/user/app"
    sandbox.files.make_dir(app)
    sandbox.files.write(f"{app}/config.json", '{"env": "test"}')
    sandbox.files.write(f"{app}/data.txt", "important data")
    snap = sandbox.create_snapshot()
    try:
        new = Sandbox.create(snap.snapshot_id)
        try:
            assert new.files.exists(app)
            assert new.files.read(f"{app}/config.json") == '{"env": "test"}'
            assert new.files.read(f"{app}/data.txt") == "important data"
        finally:
            new.kill()
    finally:
        Sandbox.delete_snapshot(snap.snapshot_id)


@pytest.mark.skip_debug()
def test_create_snapshot_class_method(sandbox: Sandbox):
    snap = Sandbox.create_snapshot(sandbox.sandbox_id)
    assert snap.snapshot_id
    assert len(snap.snapshot_id) > 0
    Sandbox.delete_snapshot(snap.snapshot_id)
