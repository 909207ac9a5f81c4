import pytest

from e2b import NotFoundException


def test_connect_to_process(sandbox):
    cmd = sandbox.commands.run("sleep 10", background=True)
    info = sandbox.commands.connect(cmd.pid)
    assert info.pid == cmd.pid


def test_connect_to_non_existing_process(sandbox):
    with pytest.raises(NotFoundException):
        sandbox.commands.connect(999999)
