import pytest

from e2b import Sandbox
from envd_support import boot_id


@pytest.mark.skip_debug()
@pytest.mark.microvm
def test_pause_filesystem_only(sandbox: Sandbox):
    from conftest import BACKEND

    sandbox.files.write("/home/user/fs-only-marker.txt", "persisted")
    boot = boot_id(sandbox)
    assert sandbox.pause(keep_memory=False)
    assert not sandbox.is_running()
    again = sandbox.connect()
    assert again.is_running()
    assert again.sandbox_id == sandbox.sandbox_id
    assert again.files.read("/home/user/fs-only-marker.txt").strip() == "persisted"
    if BACKEND == "microvm":
        # A process sandbox shares the host kernel's boot id; a microVM cold-boots.
        assert boot_id(again) != boot
