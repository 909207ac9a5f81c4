"""Templates through the client (sync and async) against a real daemon
(process backend: a template restores the filesystem)."""

from __future__ import annotations

import uuid

import pytest

from stasis_client import Client, InvalidArgument, InvalidState, NotFound, Sandbox, TemplateInfo
from stasis_client.aio import AsyncClient, AsyncSandbox

MANIFEST = {"lifecycle": {"idle_timeout_secs": 600}, "env": {"FROM": "template"}}


def test_template_versions_create_from_and_delete(client: Client) -> None:
    name = f"py-{uuid.uuid4().hex[:8]}"
    with Sandbox.create(manifest=MANIFEST, client=client) as src:
        src.files.write("data.txt", "version one")
        v1 = client.templates.create(name, src)
        assert isinstance(v1, TemplateInfo)
        assert (v1.name, v1.version, v1.reference) == (name, 1, f"{name}:1")
        assert v1.source_sandbox == src.id and v1.backend == "process"
        assert v1.manifest_digest == src.info.manifest_digest
        src.files.write("data.txt", "version two")
        v2 = client.templates.create(name, src.id)
        assert v2.version == 2

    # The latest by default, a pinned version on request; the template's manifest.
    with Sandbox.create(template=name, client=client) as a:
        assert a.files.read_text("data.txt") == "version two"
        assert a.exec("echo $FROM").text == "template\n"
        assert a.info.source_snapshot == v2.snapshot
    with client.create(template=f"{name}:1") as b:
        assert b.files.read_text("data.txt") == "version one"

    assert [t.version for t in client.templates.get(name)] == [1, 2]
    assert {t.reference for t in client.templates.list()} >= {f"{name}:1", f"{name}:2"}

    # A template's snapshot cannot be deleted from under it.
    with pytest.raises(InvalidState):
        client.delete_snapshot(v1.snapshot)

    # Bad names and references: refused with the field named; unknown: not found.
    with pytest.raises(InvalidArgument) as e:
        client.templates.create("Not A Name", "sb-whatever")
    with pytest.raises(InvalidArgument) as e:
        Sandbox.create(template=f"{name}:0", client=client)
    assert e.value.field == "template"
    with pytest.raises(InvalidArgument):
        client.templates.delete(f"{name}:x")
    with pytest.raises(NotFound):
        Sandbox.create(template=f"{name}:9", client=client)

    gone = client.templates.delete(f"{name}:1")
    assert [t.reference for t in gone] == [f"{name}:1"]
    with pytest.raises(NotFound):
        client.create(template=f"{name}:1")
    assert [t.version for t in client.templates.delete(name)] == [2]
    with pytest.raises(NotFound):
        client.templates.get(name)


async def test_async_templates(daemon) -> None:
    name = f"aio-{uuid.uuid4().hex[:8]}"
    async with AsyncClient(**daemon.connect_kwargs()) as client:
        async with await AsyncSandbox.create(manifest=MANIFEST, client=client) as src:
            await src.files.write("x.txt", "X")
            t = await client.templates.create(name, src)
            assert t.reference == f"{name}:1"
        async with await AsyncSandbox.create(template=name, client=client) as s:
            assert await s.files.read_text("x.txt") == "X"
        assert [v.version for v in await client.templates.get(name)] == [1]
        assert [v.reference for v in await client.templates.list() if v.name == name] == [f"{name}:1"]
        await client.templates.delete(name)
        with pytest.raises(NotFound):
            await client.templates.get(name)
