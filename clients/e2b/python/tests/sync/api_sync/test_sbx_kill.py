import pytest

from e2b import Sandbox, SandboxQuery, SandboxState


def running_ids(test_id: str) -> list:
    query = SandboxQuery(state=[SandboxState.RUNNING], metadata={"sandbox_test_id": test_id})
    return [s.sandbox_id for s in Sandbox.list(query=query).next_items()]


@pytest.mark.skip_debug()
def test_kill_existing_sandbox(sandbox: Sandbox, sandbox_test_id: str):
    assert Sandbox.kill(sandbox.sandbox_id)
    assert sandbox.sandbox_id not in running_ids(sandbox_test_id)


@pytest.mark.skip_debug()
def test_kill_non_existing_sandbox():
    assert not Sandbox.kill("nonexistingsandbox")
