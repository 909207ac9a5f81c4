"""The async client against a real daemon."""

from __future__ import annotations

import pytest

from stasis_client import InvalidState, NotFound
from stasis_client.aio import AsyncClient, AsyncSandbox

MANIFEST = {"lifecycle": {"idle_timeout_secs": 600}}


async def test_async_lifecycle_stream_session(daemon) -> None:
    async with AsyncClient(**daemon.connect_kwargs()) as client:
        async with await AsyncSandbox.create(manifest=MANIFEST, client=client) as sbx:
            r = await sbx.exec(["sh", "-c", "echo async"])
            assert r.text == "async\n"

            seen = []
            stream = sbx.exec_stream("for i in 1 2 3; do echo $i; done; echo bad >&2; exit 2")
            async for chunk in stream:
                seen.append((chunk.stream, chunk.data))
            assert b"".join(d for s, d in seen if s == "stdout") == b"1\n2\n3\n"
            assert stream.result is not None and stream.result.exit_code == 2
            assert stream.result.stderr == b"bad\n"

            got = []

            async def collect(chunk) -> None:
                got.append(chunk.data)

            r = await sbx.exec("echo cb", on_output=collect)
            assert b"".join(got) == b"cb\n" == r.stdout

            await sbx.files.write("a.txt", "A")
            assert await sbx.files.read_text("a.txt") == "A"
            assert "a.txt" in {e.name for e in await sbx.files.list()}

            py = await sbx.session("python")
            await py.run("counter = 10")
            assert (await sbx.pause()).state == "paused"
            assert await py.run("counter += 1\nprint(counter)") == "11\n"

            snap = await sbx.snapshot()
            restored = await AsyncSandbox.from_snapshot(snap.id, client=client)
            try:
                assert await restored.files.read_text("a.txt") == "A"
            finally:
                await restored.destroy()
            kids = await sbx.fork(1)
            assert await kids[0].files.read_text("a.txt") == "A"
            await kids[0].destroy()
            sid = sbx.id
        assert (await client.get(sid)).state == "destroyed"
        with pytest.raises(InvalidState):
            await (await client.get(sid)).exec("true")
        with pytest.raises(NotFound):
            await client.get("sb-00000000000000000000000000000000")


async def test_async_runs(daemon) -> None:
    async with AsyncClient(**daemon.connect_kwargs()) as client:
        async with await client.create(MANIFEST) as sbx:
            run = await client.runs.create(sbx)
            held = await run.call("k1", "echo x >> out", side_effecting=True, requires_approval=True)
            assert held.outcome == "awaiting_approval"
            rejected = await run.reject("k1", reason="no")
            assert rejected.outcome == "rejected"
            with pytest.raises(NotFound):
                await sbx.files.read("out")
            retry = await run.call("k1", "echo x >> out", side_effecting=True, requires_approval=True)
            assert retry.replayed and retry.outcome == "rejected"
