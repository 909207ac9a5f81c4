"""clients/e2b/python/agent_loop.py, an agent loop written for E2B, run
unmodified: only its clock is simulated, so its hour of idling (spent
paused) costs no time. Its pip install reaches PyPI through the sandbox's
allowlist: needs the Internet (STASIS_TEST_PYPI=1)."""

import importlib.util
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    os.environ.get("STASIS_TEST_PYPI") != "1",
    reason="the agent loop installs from PyPI: set STASIS_TEST_PYPI=1",
)


def _agent_loop():
    path = Path(__file__).resolve().parents[2] / "agent_loop.py"
    spec = importlib.util.spec_from_file_location("agent_loop", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_agent_loop_runs_unmodified():
    loop = _agent_loop()
    slept = []
    seen = loop.run(sleep=slept.append, log=lambda *_: None)
    assert slept == [loop.IDLE_SECONDS]
    assert seen["pip_exit"] == 0
    assert seen["other_host"] == "blocked"
    assert "Bergen" in seen["table"] and "Lisbon" in seen["table"]
    assert seen["png_bytes"] > 1000
    assert seen["paused"] is True
    assert seen["after_resume"] == f"({seen['bergen_total']}, 24)"
