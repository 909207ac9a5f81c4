"""Terminals through the clients (sync and async) and the Agents SDK
provider's PTY tools, against a real daemon (process backend)."""

from __future__ import annotations

import time

import pytest

from stasis_client import Client, InvalidArgument, InvalidState, NotFound, Sandbox, _core
from stasis_client.aio import AsyncClient, AsyncSandbox

MANIFEST = {"lifecycle": {"idle_timeout_secs": 600}}


def _read_until(p, needle: bytes, timeout: float = 20.0) -> bytes:
    got = b""
    deadline = time.monotonic() + timeout
    while needle not in got:
        assert time.monotonic() < deadline, f"no {needle!r} in {got!r}"
        got += p.read(timeout=1.0)
    return got


def test_pty_shell_size_resize_ctrl_c_pause_and_exit(client: Client) -> None:
    with Sandbox.create(manifest=MANIFEST, client=client) as sbx:
        with sbx.pty(cols=100, rows=30) as p:
            assert p.info.pty == (100, 30)
            p.write("test -t 0 && echo tty-$TERM; echo size=$(stty size) x$((1+1))\n")
            out = _read_until(p, b"x2")
            assert b"tty-xterm-256color" in out and b"size=30 100" in out
            p.resize(120, 40)
            p.write("echo now=$(stty size) y$((2+2))\n")
            assert b"now=40 120" in _read_until(p, b"y4")
            p.write("sleep 60; echo never\n")
            time.sleep(0.5)
            p.write("\x03")
            p.write("echo back-$((6*7))\n")
            _read_until(p, b"back-42")
            # A pause and a resume: the same shell goes on.
            sbx.pause()
            p.write("echo after-$((40+1))\n")
            _read_until(p, b"after-41")
            p.write("exit 5\n")
            assert p.wait(timeout=20) == 5
            rest = b"".join(p)
            assert p.ended and p.exit_code == 5, rest
            with pytest.raises(InvalidState):
                p.write("x")
        # Refusals.
        with pytest.raises(InvalidArgument):
            sbx.pty("cat", cols=0, rows=24)
        with sbx.pty(["cat"]) as p:
            with pytest.raises(InvalidArgument):
                p.resize(5000, 10)
        s = sbx.session(["cat"])
        with pytest.raises(InvalidState):
            sbx.client._run(_core.op_session_resize(sbx.id, s.id, 80, 24))
        with pytest.raises(NotFound):
            sbx.attach_session("sess-nope")


def test_pty_iterates_output_of_a_command(client: Client) -> None:
    with Sandbox.create(manifest=MANIFEST, client=client) as sbx:
        p = sbx.pty("for i in 1 2 3; do echo line$i; done; exit 2")
        out = b"".join(p)
        assert out.replace(b"\r\n", b"\n") == b"line1\nline2\nline3\n"
        assert p.exit_code == 2


async def test_async_pty(daemon) -> None:
    async with AsyncClient(**daemon.connect_kwargs()) as client:
        async with await AsyncSandbox.create(manifest=MANIFEST, client=client) as sbx:
            async with await sbx.pty(["python3", "-q"], cols=90, rows=20) as p:
                await p.write("import os; print('sz', tuple(os.get_terminal_size()))\n")
                got = b""
                while b"sz (90, 20)" not in got:
                    got += await p.read(timeout=1.0)
                await p.resize(91, 21)
                await p.write("print('sz', tuple(os.get_terminal_size()))\n")
                while b"sz (91, 21)" not in got:
                    got += await p.read(timeout=1.0)
                await p.write("raise SystemExit(9)\n")
                assert await p.wait(timeout=20) == 9
                chunks = [c async for c in p]
                assert p.ended, chunks


async def test_agents_sdk_pty_tools(daemon) -> None:
    pytest.importorskip("agents")
    from agents.sandbox import Manifest
    from agents.sandbox.errors import PtySessionNotFoundError

    from stasis_client.agents_sdk import StasisSandboxClient, StasisSandboxClientOptions

    provider = StasisSandboxClient(**daemon.connect_kwargs())
    session = await provider.create(
        manifest=Manifest(), options=StasisSandboxClientOptions(manifest=MANIFEST)
    )
    await session.start()
    inner = session._inner
    assert inner.supports_pty()
    u = await inner.pty_exec_start("python3 -q", tty=True, yield_time_s=2)
    assert u.process_id is not None and u.exit_code is None
    u = await inner.pty_write_stdin(
        session_id=u.process_id, chars="print(6 * 7)\n", yield_time_s=2
    )
    assert b"42" in u.output, u
    pid = u.process_id
    u = await inner.pty_write_stdin(session_id=pid, chars="raise SystemExit(3)\n", yield_time_s=5)
    while u.exit_code is None:
        u = await inner.pty_write_stdin(session_id=pid, chars="", yield_time_s=5)
    assert u.exit_code == 3 and u.process_id is None
    with pytest.raises(PtySessionNotFoundError):
        await inner.pty_write_stdin(session_id=pid, chars="x")
    # Without a terminal: a plain session, output and exit code all the same.
    u = await inner.pty_exec_start("echo plain; exit 4", yield_time_s=10)
    assert u.output.strip() == b"plain" and u.exit_code == 4
    u = await inner.pty_exec_start("sleep 30", tty=True, yield_time_s=0.3)
    assert u.process_id is not None
    await inner.pty_terminate_all()
    await provider.delete(session)
    await provider.api.aclose()
