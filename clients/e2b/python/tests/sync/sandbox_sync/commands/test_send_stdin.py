from e2b import Sandbox


def first_stdout(cmd) -> str:
    for stdout, _, _ in cmd:
        return stdout
    raise AssertionError("no output")


def test_send_stdin_to_process(sandbox: Sandbox):
    cmd = sandbox.commands.run("cat", background=True, stdin=True)
    sandbox.commands.send_stdin(cmd.pid, "Hello, World!")
    assert first_stdout(cmd) == "Hello, World!"


def test_send_bytes_stdin_to_process(sandbox: Sandbox):
    cmd = sandbox.commands.run("cat", background=True, stdin=True)
    sandbox.commands.send_stdin(cmd.pid, b"Hello, World!")
    assert first_stdout(cmd) == "Hello, World!"


def test_send_stdin_via_command_handle(sandbox: Sandbox):
    cmd = sandbox.commands.run("cat", background=True, stdin=True)
    cmd.send_stdin("Hello, World!")
    assert first_stdout(cmd) == "Hello, World!"


def test_close_stdin_via_command_handle(sandbox: Sandbox):
    cmd = sandbox.commands.run("cat", background=True, stdin=True)
    cmd.send_stdin("Hello, World!")
    cmd.close_stdin()
    result = cmd.wait()  # cat exits at EOF
    assert result.exit_code == 0
    assert result.stdout == "Hello, World!"


def test_send_special_characters_to_process(sandbox: Sandbox):
    cmd = sandbox.commands.run("cat", background=True, stdin=True)
    sandbox.commands.send_stdin(cmd.pid, "!@#$%^&*()_+")
    assert first_stdout(cmd) == "!@#$%^&*()_+"


def test_send_multiline_string_to_process(sandbox: Sandbox):
    cmd = sandbox.commands.run("cat", background=True, stdin=True)
    sandbox.commands.send_stdin(cmd.pid, "Hello,\nWorld!")
    assert first_stdout(cmd) == "Hello,\nWorld!"
