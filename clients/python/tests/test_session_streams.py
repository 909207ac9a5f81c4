"""Sessions without a terminal through the client, on each backend: output
split into stdout and stderr beside the combined window, a signal (a ^C)
reaching the command, and a killed session still answering its output and
exit status."""

from __future__ import annotations

import time

import pytest

from stasis_client import Client, InvalidArgument, Sandbox

from conftest import backend_params


def _drain(s, timeout: float = 60.0):
    """(combined, stdout, stderr, exit code) once the session ended."""
    allb, out, err = b"", b"", b""
    deadline = time.monotonic() + timeout
    while True:
        assert time.monotonic() < deadline, f"session still running: {allb!r}"
        o = s.read(wait_ms=2000)
        allb, out, err = allb + o.data, out + o.stdout, err + o.stderr
        if not o.running and not o.data:
            return allb, out, err, o.exit_code


def _until(s, needle: bytes, timeout: float = 60.0) -> None:
    got = b""
    deadline = time.monotonic() + timeout
    while needle not in got:
        assert time.monotonic() < deadline, f"no {needle!r} in {got!r}"
        got += s.read(wait_ms=2000).data


@pytest.mark.parametrize("backend", backend_params())
def test_streams_apart_signals_and_killed_sessions(client: Client, backend: str) -> None:
    manifest = {"backend": backend, "lifecycle": {"idle_timeout_secs": 600}}
    with Sandbox.create(manifest=manifest, client=client) as sbx:
        s = sbx.session(["sh", "-c", "echo out1; echo err1 >&2; echo out2"])
        allb, out, err, code = _drain(s)
        assert (out, err, code) == (b"out1\nout2\n", b"err1\n", 0)
        assert len(allb) == len(out) + len(err)

        s = sbx.session(["sh", "-c", "echo ready; exec sleep 1000"])
        _until(s, b"ready")
        s.kill(signal="INT")
        assert _drain(s)[3] == 130

        trap = "trap 'echo caught; exit 7' INT; echo ready; while :; do sleep 0.05; done"
        s = sbx.session(["sh", "-c", trap])
        _until(s, b"ready")
        s.kill(signal="sigint")
        allb, out, _, code = _drain(s)
        assert code == 7 and b"caught" in out, allb

        s = sbx.session(["sh", "-c", "echo before; exec sleep 1000"])
        _until(s, b"before")
        s.kill()
        allb, _, _, code = _drain(s, timeout=60)
        assert (code, allb) == (137, b"")  # read from where the last read ended
        assert s.read(offset=0).data == b"before\n"
        assert any(i.id == s.id and not i.running for i in sbx.sessions())
        with pytest.raises(InvalidArgument):
            s.kill(signal="STOP")
