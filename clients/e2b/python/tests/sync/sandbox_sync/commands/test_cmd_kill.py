import pytest

from e2b import CommandExitException, Sandbox


def test_kill_process(sandbox: Sandbox):
    cmd = sandbox.commands.run("sleep 10", background=True)
    pid = cmd.pid
    sandbox.commands.kill(pid)
    with pytest.raises(CommandExitException):
        sandbox.commands.run(f"kill -0 {pid}")


def test_kill_non_existing_process(sandbox):
    assert not sandbox.commands.kill(999999)
