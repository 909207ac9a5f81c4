import pytest

from e2b import Sandbox
from e2b.exceptions import InvalidArgumentException, SandboxNotFoundException


@pytest.mark.skip_debug()
@pytest.mark.microvm
def test_fork(sandbox: Sandbox):
    sandbox.files.write("/home/user/state.txt", "state before fork")
    forks = sandbox.fork()
    assert len(forks) == 1
    child = forks[0]
    assert isinstance(child, Sandbox)
    try:
        assert child.sandbox_id != sandbox.sandbox_id
        assert sandbox.is_running()
        assert child.is_running()
        assert child.files.read("/home/user/state.txt") == "state before fork"
        child.files.write("/home/user/state.txt", "modified in fork")
        assert sandbox.files.read("/home/user/state.txt") == "state before fork"
    finally:
        child.kill()


@pytest.mark.skip_debug()
def test_fork_multiple(sandbox: Sandbox):
    forks = sandbox.fork(count=2, timeout=60)
    assert len(forks) == 2
    kids = [f for f in forks if isinstance(f, Sandbox)]
    try:
        assert len(kids) == 2
        ids = {k.sandbox_id for k in kids}
        assert len(ids) == 2
        assert sandbox.sandbox_id not in ids
        for k in kids:
            assert k.is_running()
    finally:
        for k in kids:
            k.kill()


@pytest.mark.skip_debug()
def test_fork_by_id(sandbox: Sandbox):
    forks = Sandbox.fork(sandbox.sandbox_id)
    assert len(forks) == 1
    child = forks[0]
    assert isinstance(child, Sandbox)
    try:
        assert child.is_running()
    finally:
        child.kill()


@pytest.mark.skip_debug()
def test_fork_killed_sandbox(sandbox_factory):
    sbx = sandbox_factory()
    sbx.kill()
    with pytest.raises(SandboxNotFoundException):
        sbx.fork()


def test_fork_invalid_count():
    with pytest.raises(InvalidArgumentException):
        Sandbox.fork("sbx-test", count=0)
