from e2b import Sandbox


def test_kill_process(sandbox: Sandbox):
    c1 = sandbox.commands.run("sleep 10", background=True)
    c2 = sandbox.commands.run("sleep 10", background=True)
    pids = [p.pid for p in sandbox.commands.list()]
    assert len(pids) >= 2
    assert c1.pid in pids
    assert c2.pid in pids
