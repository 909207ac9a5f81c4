"""Upstream's async commands tests (test_run.py, test_cmd_kill.py,
test_cmd_list.py, test_cmd_connect.py, test_env_vars.py,
test_send_stdin.py, test_sandbox_killed_during_run.py), names kept."""

import asyncio

import pytest

from e2b import AsyncSandbox, CommandExitException, NotFoundException, TimeoutException


async def test_run(async_sandbox: AsyncSandbox):
    cmd = await async_sandbox.commands.run('echo "Hello, World!"')
    assert cmd.exit_code == 0
    assert cmd.stdout == "Hello, World!\n"


async def test_run_with_special_characters(async_sandbox: AsyncSandbox):
    cmd = await async_sandbox.commands.run('echo "!@#$%^&*()_+"')
    assert cmd.exit_code == 0
    assert cmd.stdout == "!@#$%^&*()_+\n"


async def test_run_with_broken_utf8(async_sandbox: AsyncSandbox):
    result = await async_sandbox.commands.run('printf "' + "a" * 8191 + '\\xe2"')
    assert result.exit_code == 0
    assert result.stdout == "a" * 8191 + "\ufffd"


async def test_run_with_multiline_string(async_sandbox: AsyncSandbox):
    cmd = await async_sandbox.commands.run('echo "Hello,\nWorld!"')
    assert cmd.exit_code == 0
    assert cmd.stdout == "Hello,\nWorld!\n"


async def test_run_with_timeout(async_sandbox: AsyncSandbox):
    cmd = await async_sandbox.commands.run('echo "Hello, World!"', timeout=10)
    assert cmd.exit_code == 0


async def test_run_with_too_short_timeout(async_sandbox: AsyncSandbox):
    with pytest.raises(TimeoutException):
        await async_sandbox.commands.run("sleep 10", timeout=2)


async def test_kill_process(async_sandbox: AsyncSandbox):
    cmd = await async_sandbox.commands.run("sleep 10", background=True)
    await async_sandbox.commands.kill(cmd.pid)
    with pytest.raises(CommandExitException):
        await async_sandbox.commands.run(f"kill -0 {cmd.pid}")


async def test_kill_non_existing_process(async_sandbox: AsyncSandbox):
    assert not await async_sandbox.commands.kill(999999)


async def test_list_processes(async_sandbox: AsyncSandbox):
    # upstream: test_cmd_list.py::test_kill_process
    c1 = await async_sandbox.commands.run("sleep 10", background=True)
    c2 = await async_sandbox.commands.run("sleep 10", background=True)
    pids = [p.pid for p in await async_sandbox.commands.list()]
    assert len(pids) >= 2
    assert c1.pid in pids
    assert c2.pid in pids


async def test_connect_to_process(async_sandbox: AsyncSandbox):
    cmd = await async_sandbox.commands.run("sleep 10", background=True)
    info = await async_sandbox.commands.connect(cmd.pid)
    assert info.pid == cmd.pid


async def test_connect_to_non_existing_process(async_sandbox: AsyncSandbox):
    with pytest.raises(NotFoundException):
        await async_sandbox.commands.connect(999999)


async def test_command_envs(async_sandbox: AsyncSandbox):
    cmd = await async_sandbox.commands.run("echo $FOO", envs={"FOO": "bar"})
    assert cmd.stdout.strip() == "bar"


@pytest.mark.skip_debug()
async def test_sandbox_envs(async_sandbox_factory):
    sbx = await async_sandbox_factory(envs={"FOO": "bar"})
    cmd = await sbx.commands.run("echo $FOO")
    assert cmd.stdout.strip() == "bar"


async def test_python_command_scoped_env_vars(async_sandbox: AsyncSandbox):
    cmd = await async_sandbox.commands.run("python3 -c \"import os; print(os.environ['FOO'])\"", envs={"FOO": "bar"})
    assert cmd.exit_code == 0
    assert cmd.stdout.strip() == "bar"


async def stdin_echo(sbx: AsyncSandbox, send) -> str:
    seen = asyncio.Event()
    cmd = await sbx.commands.run("cat", background=True, on_stdout=lambda _: seen.set(), stdin=True)
    await send(cmd)
    await seen.wait()
    return cmd.stdout


async def test_send_stdin_to_process(async_sandbox: AsyncSandbox):
    out = await stdin_echo(async_sandbox, lambda c: async_sandbox.commands.send_stdin(c.pid, "Hello, World!"))
    assert out == "Hello, World!"


async def test_send_bytes_stdin_to_process(async_sandbox: AsyncSandbox):
    out = await stdin_echo(async_sandbox, lambda c: async_sandbox.commands.send_stdin(c.pid, b"Hello, World!"))
    assert out == "Hello, World!"


async def test_send_stdin_via_command_handle(async_sandbox: AsyncSandbox):
    out = await stdin_echo(async_sandbox, lambda c: c.send_stdin("Hello, World!"))
    assert out == "Hello, World!"


async def test_send_special_characters_to_process(async_sandbox: AsyncSandbox):
    out = await stdin_echo(async_sandbox, lambda c: async_sandbox.commands.send_stdin(c.pid, "!@#$%^&*()_+"))
    assert out == "!@#$%^&*()_+"


@pytest.mark.skip_debug()
async def test_kill_sandbox_while_command_is_running(async_sandbox: AsyncSandbox):
    cmd = await async_sandbox.commands.run("sleep 60", background=True)
    await async_sandbox.kill()
    with pytest.raises(TimeoutException) as exc_info:
        await cmd.wait()
    assert "sandbox was killed or reached its end of life" in str(exc_info.value)
