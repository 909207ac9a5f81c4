"""A command still running when an Agents SDK run stops for an approval keeps
running: the provider pauses the sandbox with it instead of terminating it,
and the resumed run (in a new process) reads its output and exit code."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("agents")

from conftest import backend_params, run_phase
from stasis_client import Client

HERE = Path(__file__).resolve().parent


def _phase(daemon, *args: str) -> dict:
    return run_phase(daemon, HERE / "approval_flow.py", *args)


@pytest.mark.parametrize("backend", backend_params())
def test_command_in_flight_survives_the_approval_and_finishes_after_it(daemon, tmp_path, backend) -> None:
    state_file = tmp_path / "run_state.json"
    first = _phase(daemon, "start", str(state_file), backend)
    assert first["interruptions"] == ["release_work"]
    pid = first["process_id"]
    assert pid is not None, first["work_output"]
    # The state names the command's stasis session, for a resume in another process.
    ref = first["pty_processes"][str(pid)]
    assert ref["session_id"]

    with Client(**daemon.connect_kwargs()) as c:
        sbx = c.get(first["sandbox_id"])
        # The run's end paused the sandbox, with the command in it.
        assert sbx.state == "paused"
        assert not sbx.files.exists("done.txt")
        sessions = {s.id: s for s in sbx.sessions()}
        assert sessions[ref["session_id"]].running

    second = _phase(daemon, "resume", str(state_file), backend, str(pid))
    assert second["final_output"] == "The work finished."
    assert second["tool_outputs"]["call-release"] == "released (exit 0)"
    poll = second["tool_outputs"]["call-poll"]
    assert "Process exited with code 0" in poll, poll
    assert "work-finished" in poll, poll

    with Client(**daemon.connect_kwargs()) as c:
        sbx = c.get(first["sandbox_id"])
        assert sbx.files.read_text("done.txt") == "finished\n"
        sbx.destroy()
