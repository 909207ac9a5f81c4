import pytest

from e2b import Sandbox, TimeoutException


@pytest.mark.skip_debug()
def test_kill_sandbox_while_command_is_running(sandbox: Sandbox):
    cmd = sandbox.commands.run("sleep 60", background=True)
    sandbox.kill()
    with pytest.raises(TimeoutException) as exc_info:
        cmd.wait()
    # The health probe finds the sandbox gone, and the error says so.
    assert "sandbox was killed or reached its end of life" in str(exc_info.value)
