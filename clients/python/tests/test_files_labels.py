"""The file API beyond whole files, labels, paginated listing and the
lifecycle change, through the sync and async clients, against a real daemon."""

from __future__ import annotations

import threading
import time

import pytest

from stasis_client import AlreadyExists, InvalidArgument, InvalidState, NotFound, Sandbox
from stasis_client.aio import AsyncClient

MANIFEST = {"backend": "process", "lifecycle": {"on_idle": "nothing"}}


def test_files_remove_rename_mkdir_stat_exists(client) -> None:
    with client.create(MANIFEST) as sbx:
        f = sbx.files
        f.write("a.txt", b"0123456789", exclusive=True)
        with pytest.raises(AlreadyExists):
            f.write("a.txt", b"x", exclusive=True)
        assert f.read("a.txt") == b"0123456789"
        assert f.read("a.txt", offset=2, length=3) == b"234"
        assert f.read("a.txt", offset=8) == b"89"

        st = f.stat("a.txt")
        assert (st.kind, st.size, st.path, st.is_file) == ("file", 10, "/workspace/a.txt", True)
        assert f.exists("a.txt") and not f.exists("nope")
        with pytest.raises(NotFound):
            f.stat("nope")

        f.mkdir("d/e")
        with pytest.raises(AlreadyExists):
            f.mkdir("d", parents=False)
        f.rename("a.txt", "d/e/b.txt")
        assert f.read("d/e/b.txt") == b"0123456789" and not f.exists("a.txt")
        with pytest.raises(InvalidState):
            f.remove("d")
        f.remove("d", recursive=True)
        assert not f.exists("d")

        # A symlink to a directory not made yet: writing through it makes it.
        sbx.exec("ln -s /workspace/real alias")
        f.write("alias/internal/x", "1")
        assert sbx.exec("cat /workspace/real/internal/x").text == "1"
        link = f.stat("alias")
        assert link.is_symlink and link.symlink_target == "/workspace/real"
        with pytest.raises(InvalidArgument):
            f.remove("../../..")


def test_watch_streams_events(client) -> None:
    with client.create(MANIFEST) as sbx:
        sbx.files.mkdir("w")
        events = []
        with sbx.files.watch("w") as w:
            done = threading.Event()

            def collect() -> None:
                for ev in w:
                    events.append(ev)
                    if ev.kind == "removed":
                        done.set()
                        return

            t = threading.Thread(target=collect, daemon=True)
            t.start()
            time.sleep(0.3)
            sbx.exec("echo hi > w/a && mv w/a w/b && rm w/b")
            assert done.wait(10), events
        kinds = [(e.kind, e.path, e.to) for e in events]
        assert ("created", "a", None) in kinds
        assert ("renamed", "a", "b") in kinds
        assert ("removed", "b", None) in kinds


def test_labels_pages_filters_and_set_timeout(daemon, client) -> None:
    tag = f"t{time.monotonic_ns()}"
    made = [
        client.create(MANIFEST, labels={"suite": tag, "team": "a" if i != 1 else "b"})
        for i in range(3)
    ]
    try:
        assert made[0].info.labels == {"suite": tag, "team": "a"}
        pager = Sandbox.list(labels={"suite": tag}, limit=2, **daemon.connect_kwargs())
        first = pager.next_items()
        assert len(first) == 2 and pager.has_next
        second = pager.next_items()
        assert [s.id for s in first + second] == [s.id for s in made] and not pager.has_next
        team_a = list(Sandbox.list(labels={"suite": tag, "team": "a"}, **daemon.connect_kwargs()))
        assert [s.id for s in team_a] == [made[0].id, made[2].id]
        page = client.list_page(labels={"suite": tag}, created_after=first[0].created_at_ms)
        assert made[0].id not in [s.id for s in page.sandboxes]
        with pytest.raises(InvalidArgument):
            client.list_page(limit=0)

        info = made[0].set_timeout(120)
        assert info.manifest["lifecycle"]["max_lifetime_secs"] >= 120
        info = made[0].set_lifecycle(idle_timeout_secs=900, on_idle="pause")
        assert info.manifest["lifecycle"]["idle_timeout_secs"] == 900
        with pytest.raises(InvalidArgument) as e:
            made[0].set_lifecycle(paused_ttl_secs=0)
        assert e.value.field == "paused_ttl_secs"
        # Reads never change it.
        assert made[0].refresh().manifest["lifecycle"]["idle_timeout_secs"] == 900
    finally:
        for s in made:
            s.destroy()


async def test_async_files_and_lifecycle(daemon) -> None:
    async with AsyncClient(**daemon.connect_kwargs()) as c:
        sbx = await c.create(MANIFEST, labels={"k": "v"})
        try:
            await sbx.files.write("f", b"abcdef", exclusive=True)
            with pytest.raises(AlreadyExists):
                await sbx.files.write("f", b"x", exclusive=True)
            assert await sbx.files.read("f", offset=1, length=2) == b"bc"
            assert (await sbx.files.stat("f")).size == 6
            await sbx.files.rename("f", "g")
            assert await sbx.files.exists("g")
            await sbx.files.remove("g")
            assert not await sbx.files.exists("g")
            info = await sbx.set_timeout(60)
            assert info.manifest["lifecycle"]["max_lifetime_secs"] >= 60
            page = await c.list_page(labels={"k": "v"})
            assert sbx.id in [s.id for s in page.sandboxes]
        finally:
            await sbx.destroy()
