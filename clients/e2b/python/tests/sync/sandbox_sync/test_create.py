from time import sleep
from typing import Any, cast

import pytest

from e2b import Sandbox, SandboxState
from e2b.exceptions import InvalidArgumentException
from e2b.sandbox.sandbox_api import SandboxQuery
from envd_support import boot_id


@pytest.mark.skip_debug()
@pytest.mark.microvm
def test_start(sandbox_factory):
    sbx = sandbox_factory(timeout=5)
    assert sbx.is_running()
    assert sbx._envd_version is not None


@pytest.mark.skip_debug()
def test_metadata(sandbox_factory):
    sbx = sandbox_factory(timeout=5, metadata={"test-key": "test-value"})
    found = [
        s
        for s in Sandbox.list(query=SandboxQuery(metadata={"test-key": "test-value"})).next_items()
        if s.sandbox_id == sbx.sandbox_id
    ]
    assert found, "Sandbox not found"
    assert found[0].metadata is not None
    assert found[0].metadata["test-key"] == "test-value"


@pytest.mark.skip_debug()
def test_filesystem_only_auto_pause_rejects_auto_resume():
    with pytest.raises(InvalidArgumentException):
        Sandbox.create(
            timeout=3,
            lifecycle={"on_timeout": {"action": "pause", "keep_memory": False}, "auto_resume": True},
        )


@pytest.mark.skip_debug()
def test_keep_memory_not_allowed_with_kill():
    with pytest.raises(InvalidArgumentException):
        Sandbox.create(
            timeout=3,
            lifecycle=cast(Any, {"on_timeout": {"action": "kill", "keep_memory": False}}),
        )


@pytest.mark.skip_debug()
def test_invalid_on_timeout_type_does_not_crash(sandbox_factory):
    sbx = sandbox_factory(timeout=10, lifecycle=cast(Any, {"on_timeout": None}))
    assert sbx.is_running()


def wait_not_running(sbx: Sandbox) -> None:
    for _ in range(150):
        if not sbx.is_running():
            return
        sleep(0.2)


@pytest.mark.skip_debug()
@pytest.mark.microvm
def test_keep_memory_none_defaults_to_full_memory(sandbox_factory):
    # A full-memory timeout pause resumes the same machine: same boot id.
    sbx = sandbox_factory(timeout=60, lifecycle={"on_timeout": {"action": "pause", "keep_memory": None}})
    boot = boot_id(sbx)
    sbx.set_timeout(0)
    wait_not_running(sbx)
    assert not sbx.is_running()
    again = sbx.connect()
    assert again.sandbox_id == sbx.sandbox_id
    assert boot_id(again) == boot


@pytest.mark.skip_debug()
@pytest.mark.microvm
def test_auto_pause_filesystem_only_reboots(sandbox_factory):
    from conftest import BACKEND

    if BACKEND != "microvm":
        pytest.skip("a process sandbox shares the host's kernel boot id: the cold boot is only visible in a microVM")
    sbx = sandbox_factory(timeout=3, lifecycle={"on_timeout": {"action": "pause", "keep_memory": False}})
    sbx.files.write("/home/user/auto-pause-marker.txt", "auto-pause-fs-only")
    boot = boot_id(sbx)
    sleep(5)
    assert sbx.get_info().state == SandboxState.PAUSED
    again = sbx.connect()
    assert again.files.read("/home/user/auto-pause-marker.txt").strip() == "auto-pause-fs-only"
    assert boot_id(again) != boot


@pytest.mark.skip_debug()
def test_auto_pause_without_auto_resume_requires_connect(sandbox_factory):
    sbx = sandbox_factory(timeout=3, lifecycle={"on_timeout": "pause", "auto_resume": False})
    sleep(5)
    assert sbx.get_info().state == SandboxState.PAUSED
    assert not sbx.is_running()
    sbx.connect()
    assert sbx.get_info().state == SandboxState.RUNNING
    assert sbx.is_running()
