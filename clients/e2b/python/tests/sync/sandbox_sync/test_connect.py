import uuid

import pytest

from e2b import Sandbox


@pytest.mark.skip_debug()
def test_connect(sandbox_factory):
    sbx = sandbox_factory(timeout=10)
    assert sbx.is_running()
    assert Sandbox.connect(sbx.sandbox_id).is_running()


@pytest.mark.skip_debug()
def test_connect_with_secure(sandbox_factory):
    name = f"test_directory_{uuid.uuid4()}"
    sbx = sandbox_factory(timeout=10, secure=True)
    assert sbx.is_running()
    other = Sandbox.connect(sbx.sandbox_id)
    other.files.make_dir(name)
    assert len(other.files.list(name)) == 0


@pytest.mark.skip_debug()
@pytest.mark.microvm
def test_connect_to_paused_sandbox_resumes(sandbox):
    sandbox.pause()
    assert not sandbox.is_running()
    assert Sandbox.connect(sandbox.sandbox_id).is_running()


@pytest.mark.skip_debug()
def test_resume_does_not_shorten_timeout_on_running_sandbox(sandbox_factory):
    sbx = sandbox_factory(timeout=300)
    assert sbx.is_running()
    before = Sandbox.get_info(sbx.sandbox_id).end_at
    Sandbox.connect(sbx.sandbox_id, timeout=10)
    after = Sandbox.get_info(sbx.sandbox_id).end_at
    assert after == before, f"Timeout was shortened: before={before}, after={after}"


@pytest.mark.skip_debug()
def test_connect_extends_timeout_on_running_sandbox(sandbox):
    before = sandbox.get_info().end_at
    Sandbox.connect(sandbox.sandbox_id, timeout=600)
    after = sandbox.get_info().end_at
    assert after > before, f"Timeout was not extended: before={before}, after={after}"
