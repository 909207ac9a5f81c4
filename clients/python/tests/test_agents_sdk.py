"""stasis as the OpenAI Agents SDK's sandbox provider, against a real daemon."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

pytest.importorskip("agents")

from agents.sandbox import Manifest
from agents.sandbox.entries import File

from conftest import run_phase
from stasis_client import Client
from stasis_client.agents_sdk import (
    StasisSandboxClient,
    StasisSandboxClientOptions,
    StasisSandboxSessionState,
    StasisSnapshot,
)

HERE = Path(__file__).resolve().parent
OPTIONS = StasisSandboxClientOptions(manifest={"lifecycle": {"idle_timeout_secs": 600}})


async def test_provider_create_exec_files_stop_delete_resume(daemon) -> None:
    provider = StasisSandboxClient(**daemon.connect_kwargs())
    manifest = Manifest(
        entries={"notes/hello.txt": File(content=b"hello from the manifest\n")},
        environment={"value": {"GREETING": "hi"}},
    )
    session = await provider.create(manifest=manifest, options=OPTIONS)
    await session.start()
    inner = session._inner
    sid = inner.state.sandbox_id
    assert sid and sid.startswith("sb-")
    assert inner.state.run_id and inner.state.run_id.startswith("run-")

    # The SDK materialized the manifest entry through this provider's write().
    assert (await session.read(Path("notes/hello.txt"))).read() == b"hello from the manifest\n"
    r = await session.exec("echo $GREETING; pwd")
    assert r.exit_code == 0 and r.stdout == b"hi\n/workspace\n"
    r = await session.exec("exit 4")
    assert r.exit_code == 4
    from agents.sandbox.errors import ExecTimeoutError

    with pytest.raises(ExecTimeoutError):
        await session.exec("sleep 30", timeout=0.5)
    await session.write(Path("out/result.txt"), io.BytesIO(b"result"))
    assert [e.path for e in await session.ls("out")] == ["/workspace/out/result.txt"]
    from agents.sandbox.errors import WorkspaceReadNotFoundError

    with pytest.raises(WorkspaceReadNotFoundError):
        await session.read(Path("missing.txt"))

    # stop() takes a native stasis snapshot; delete() pauses the sandbox.
    await session.stop()
    snap = inner.state.snapshot
    assert isinstance(snap, StasisSnapshot) and snap.snapshot_id.startswith("snap-")
    await provider.delete(session)
    with Client(**daemon.connect_kwargs()) as c:
        assert c.get(sid).state == "paused"

    # The serialized state carries ids, never a token.
    payload = provider.serialize_session_state(inner.state)
    text = json.dumps(payload)
    assert sid in text and snap.snapshot_id in text
    if daemon.token_file is not None:
        assert daemon.token_file.read_text().strip() not in text

    # Resume in a "new process" (a new provider): reattaches to the same sandbox.
    provider2 = StasisSandboxClient(**daemon.connect_kwargs())
    state = provider2.deserialize_session_state(json.loads(text))
    assert isinstance(state, StasisSandboxSessionState)
    resumed = await provider2.resume(state)
    await resumed.start()
    assert resumed._inner.origin == "reattached"
    assert resumed._inner.state.sandbox_id == sid
    assert (await resumed.read(Path("out/result.txt"))).read() == b"result"

    # The sandbox is destroyed (e.g. its TTL ran out): resume restores the snapshot.
    with Client(**daemon.connect_kwargs()) as c:
        c.get(sid).destroy()
    state = provider2.deserialize_session_state(json.loads(text))
    rehydrated = await provider2.resume(state)
    await rehydrated.start()
    assert rehydrated._inner.origin == "restored"
    new_sid = rehydrated._inner.state.sandbox_id
    assert new_sid != sid
    assert (await rehydrated.read(Path("out/result.txt"))).read() == b"result"
    assert (await rehydrated.read(Path("notes/hello.txt"))).read() == b"hello from the manifest\n"
    # The session's stasis run moved with it.
    with Client(**daemon.connect_kwargs()) as c:
        assert c.runs.get(state.run_id).data["sandbox"] == new_sid
    rehydrated._inner.state.on_delete = "destroy"
    await provider2.delete(rehydrated)
    with Client(**daemon.connect_kwargs()) as c:
        assert c.get(new_sid).state == "destroyed"
    await provider.api.aclose()
    await provider2.api.aclose()


async def test_provider_refuses_unsupported_manifest(daemon) -> None:
    from agents.sandbox.types import User

    provider = StasisSandboxClient(**daemon.connect_kwargs())
    with pytest.raises(ValueError, match="users or groups"):
        await provider.create(manifest=Manifest(users=[User(name="bob")]), options=OPTIONS)
    from agents.sandbox.manifest import SandboxPathGrant

    with pytest.raises(ValueError, match="host_path"):
        await provider.create(
            manifest=Manifest(extra_path_grants=(SandboxPathGrant(path="/data", host_path="/srv"),)),
            options=OPTIONS,
        )
    with pytest.raises(ValueError, match="root"):
        await provider.create(
            manifest=Manifest(), options=StasisSandboxClientOptions(manifest={"workdir": "/x"})
        )
    await provider.api.aclose()


def _phase(daemon, phase: str, state_file: Path) -> dict:
    return run_phase(daemon, HERE / "agent_flow.py", phase, str(state_file))


@pytest.mark.parametrize("sandbox_fate", ["kept", "destroyed"])
def test_agent_run_pauses_for_approval_and_finishes_in_a_new_process(
    daemon, tmp_path, sandbox_fate
) -> None:
    state_file = tmp_path / "run_state.json"
    first = _phase(daemon, "start", state_file)
    assert first["interruptions"] == ["send_email"]
    assert first["remaining_steps"] == 0
    assert first["backend_id"] == "stasis"
    sid, run_id = first["sandbox_id"], first["run_id"]
    assert sid.startswith("sb-") and run_id.startswith("run-")
    assert first["snapshot_id"].startswith("snap-")

    with Client(**daemon.connect_kwargs()) as c:
        sbx = c.get(sid)
        # Between the phases the sandbox is paused: no compute while waiting.
        assert sbx.state == "paused"
        assert sbx.files.read_text("computed.txt") == "91\n"
        assert c.runs.get(run_id).data["tool_calls"] == []
        if sandbox_fate == "destroyed":
            sbx.destroy()

    second = _phase(daemon, "resume", state_file)
    assert second["approved"] == ["send_email"]
    assert second["final_output"] == "Emailed ops: value is 91."
    assert second["remaining_steps"] == 0
    assert second["tool_outputs"]["call-email-1"] == "succeeded (replayed=False)"

    with Client(**daemon.connect_kwargs()) as c:
        run = c.runs.get(run_id).data
        sbx = c.get(run["sandbox"])
        if sandbox_fate == "kept":
            assert sbx.id == sid
        else:
            assert sbx.id != sid and sbx.info.source_snapshot == first["snapshot_id"]
        # The code ran once (in the first process), the email was sent once.
        assert sbx.files.read_text("computed.txt") == "91\n"
        sent = sbx.files.read_text("outbox/sent.log").splitlines()
        assert [json.loads(l) for l in sent] == [{"to": "ops@example.com", "body": "value is 91"}]
        calls = run["tool_calls"]
        assert [(k["idempotency_key"], k["state"]) for k in calls] == [("call-email-1", "succeeded")]

    if sandbox_fate == "kept":
        # The resumed process dies before saving its state and is run again from
        # the same saved RunState: the SDK asks for the tool again, stasis
        # answers from the record, and nothing is sent twice.
        third = _phase(daemon, "resume", state_file)
        assert third["tool_outputs"]["call-email-1"] == "succeeded (replayed=True)"
        with Client(**daemon.connect_kwargs()) as c:
            sbx = c.get(sid)
            assert len(sbx.files.read_text("outbox/sent.log").splitlines()) == 1
            assert sbx.files.read_text("computed.txt") == "91\n"
