import pytest

from e2b import Sandbox, SandboxQuery, SandboxState


@pytest.mark.skip_debug()
@pytest.mark.microvm
def test_kill(sandbox: Sandbox, sandbox_test_id: str):
    sandbox.kill()
    query = SandboxQuery(state=[SandboxState.RUNNING], metadata={"sandbox_test_id": sandbox_test_id})
    assert sandbox.sandbox_id not in [s.sandbox_id for s in Sandbox.list(query=query).next_items()]
