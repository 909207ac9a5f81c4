"""Upstream's pty tests (test_pty.py, test_pty_connect.py, test_pty_kill.py,
test_resize.py, test_send_input.py), names kept."""

import pytest

from e2b import CommandExitException, Sandbox
from e2b.sandbox.commands.command_handle import PtySize


def collect(out: list):
    return lambda x: out.append(x.decode("utf-8"))


def test_pty(sandbox: Sandbox):
    terminal = sandbox.pty.create(PtySize(80, 24), envs={"ABC": "123"}, cwd="/")
    sandbox.pty.send_stdin(terminal.pid, b"echo $ABC\nexit\n")
    out: list = []
    assert terminal.wait(on_pty=collect(out)).exit_code == 0
    assert "123" in "\n".join(out)


@pytest.mark.skip_debug()
def test_connect_to_pty(sandbox_factory):
    sandbox = sandbox_factory(timeout=100)
    terminal = sandbox.pty.create(PtySize(80, 24), envs={"FOO": "bar"})
    sandbox.pty.send_stdin(terminal.pid, b"echo $FOO\n")
    terminal.disconnect()
    again = sandbox.pty.connect(terminal.pid)  # a new handler
    sandbox.pty.send_stdin(terminal.pid, b"echo $FOO\nexit\n")
    out: list = []
    result = again.wait(on_pty=collect(out))
    assert terminal.pid == again.pid
    assert result.exit_code == 0
    assert "bar" in "".join(out)


def test_kill_pty(sandbox: Sandbox):
    terminal = sandbox.pty.create(PtySize(80, 24))
    assert sandbox.pty.kill(terminal.pid)
    with pytest.raises(CommandExitException):
        sandbox.commands.run(f"kill -0 {terminal.pid}")


def test_kill_non_existing_pty(sandbox: Sandbox):
    assert not sandbox.pty.kill(999999)


def test_resize(sandbox: Sandbox):
    terminal = sandbox.pty.create(PtySize(cols=80, rows=24))
    sandbox.pty.send_stdin(terminal.pid, b"tput cols\nexit\n")
    out: list = []
    assert terminal.wait(on_pty=collect(out)).exit_code == 0
    assert "80" in "".join(out)
    terminal = sandbox.pty.create(PtySize(cols=80, rows=24))
    sandbox.pty.resize(terminal.pid, PtySize(cols=100, rows=24))
    sandbox.pty.send_stdin(terminal.pid, b"tput cols\nexit\n")
    out = []
    assert terminal.wait(on_pty=collect(out)).exit_code == 0
    assert "100" in "".join(out)


def test_send_input(sandbox: Sandbox):
    terminal = sandbox.pty.create(PtySize(cols=80, rows=24))
    sandbox.pty.send_stdin(terminal.pid, b"exit\n")
    assert terminal.wait().exit_code == 0
