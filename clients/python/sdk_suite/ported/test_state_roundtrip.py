"""Ported from the SDK's ``tests/sandbox/test_session_state_roundtrip.py`` and
the provider-state cases of ``tests/sandbox/test_snapshot.py``: the SDK's
generic round-trip guarantees (subclass identity through ``parse``, the
``type`` discriminator under ``exclude_unset``, snapshot subclass fields,
manifest environment values) asserted on the stasis session state instead
of the upstream test-only stubs and ``UnixLocalSandboxSessionState``, with
the stasis fields (sandbox, manifest, run, commands in flight, native
snapshot) included. No daemon is needed."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from agents.sandbox import Manifest
from agents.sandbox.manifest import EnvEntry, Environment, StrEnvValue
from agents.sandbox.session import SandboxSessionState
from agents.sandbox.snapshot import LocalSnapshot

from stasis_client.agents_sdk import (
    StasisPtyRef,
    StasisSandboxClient,
    StasisSandboxSessionState,
    StasisSnapshot,
)


def _state(snapshot=None) -> StasisSandboxSessionState:
    return StasisSandboxSessionState(
        session_id=uuid.UUID("aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"),
        snapshot=snapshot or StasisSnapshot(id="s1", snapshot_id="snap-0123"),
        manifest=Manifest(root="/workspace"),
        sandbox_id="sb-0123",
        base_url="http://127.0.0.1:7070",
        stasis_manifest={"backend": "process", "lifecycle": {"idle_timeout_secs": 60}},
        on_delete="keep",
        run_id="run-0123",
        pty_processes={7: StasisPtyRef(session_id="sess-1", offset=42)},
    )


def test_parse_reconstructs_the_stasis_state_from_json() -> None:
    original = _state()
    payload = json.loads(original.model_dump_json())
    restored = SandboxSessionState.parse(payload)
    assert type(restored) is StasisSandboxSessionState
    assert restored.sandbox_id == "sb-0123" and restored.run_id == "run-0123"
    assert restored.stasis_manifest == original.stasis_manifest
    assert restored.on_delete == "keep"
    assert restored.pty_processes == {7: StasisPtyRef(session_id="sess-1", offset=42)}
    assert isinstance(restored.snapshot, StasisSnapshot)
    assert restored.snapshot.snapshot_id == "snap-0123"


def test_client_deserializes_its_state() -> None:
    payload = json.loads(_state().model_dump_json())
    restored = StasisSandboxClient("http://127.0.0.1:9").deserialize_session_state(payload)
    assert type(restored) is StasisSandboxSessionState
    assert restored.model_dump(mode="json") == _state().model_dump(mode="json")


def test_type_survives_exclude_unset() -> None:
    dumped = _state().model_dump(exclude_unset=True)
    assert dumped["type"] == "stasis"
    assert dumped["snapshot"]["type"] == "stasis"


def test_model_dump_preserves_snapshot_subclass_fields() -> None:
    assert _state().model_dump()["snapshot"]["snapshot_id"] == "snap-0123"
    local = _state(LocalSnapshot(id="local-snapshot", base_path=Path("/tmp/snapshots")))
    payload = local.model_dump()
    assert payload["snapshot"]["base_path"] == Path("/tmp/snapshots")
    restored = StasisSandboxSessionState.model_validate(payload)
    assert isinstance(restored.snapshot, LocalSnapshot)
    assert restored.snapshot.base_path == Path("/tmp/snapshots")


def test_parse_returns_instances_as_is_and_upgrades_base_instances() -> None:
    state = _state()
    assert SandboxSessionState.parse(state) is state
    base = SandboxSessionState.model_validate(state.model_dump())
    upgraded = SandboxSessionState.parse(base)
    # As upstream (whose stub has no fields of its own): the type comes back;
    # fields the base model never held cannot.
    assert type(upgraded) is StasisSandboxSessionState


def test_parse_reads_manifest_environment_values() -> None:
    payload = _state().model_dump(mode="json")
    payload["manifest"]["environment"] = {
        "value": {
            "DIRECT": {"value": "direct-value"},
            "ENTRY": {"description": "typed", "ephemeral": True, "value": {"value": "entry-value"}},
        }
    }
    restored = SandboxSessionState.parse(payload)
    assert type(restored) is StasisSandboxSessionState
    assert restored.manifest.environment == Environment(
        value={
            "DIRECT": StrEnvValue(value="direct-value"),
            "ENTRY": EnvEntry(description="typed", ephemeral=True, value=StrEnvValue(value="entry-value")),
        }
    )


def test_parse_rejects_an_invalid_stasis_payload() -> None:
    payload = _state().model_dump(mode="json")
    payload["on_delete"] = "explode"
    with pytest.raises(Exception):
        SandboxSessionState.parse(payload)
