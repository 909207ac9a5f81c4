import pytest

from e2b import Sandbox


@pytest.mark.skip_debug()
@pytest.mark.microvm
def test_snapshot(sandbox: Sandbox):
    assert sandbox.is_running()
    sandbox.pause()
    assert not sandbox.is_running()
    again = sandbox.connect()
    assert sandbox.is_running()
    assert again.is_running()
    assert again.sandbox_id == sandbox.sandbox_id
