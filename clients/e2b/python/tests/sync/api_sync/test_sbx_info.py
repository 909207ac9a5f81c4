import pytest

from e2b import Sandbox


@pytest.mark.skip_debug()
@pytest.mark.microvm
def test_get_info(sandbox: Sandbox):
    got = Sandbox.get_info(sandbox.sandbox_id)
    assert got.sandbox_id == sandbox.sandbox_id
