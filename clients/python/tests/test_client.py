"""The sync client against a real daemon (process backend)."""

from __future__ import annotations

import pytest

from stasis_client import (
    Client,
    CodeError,
    InvalidArgument,
    InvalidManifest,
    InvalidState,
    NotFound,
    Sandbox,
)

# Long idle window: the tests pause explicitly, the reaper must not race them.
MANIFEST = {"lifecycle": {"idle_timeout_secs": 600}}


def test_create_exec_files_destroy(client: Client) -> None:
    with Sandbox.create(manifest=MANIFEST, client=client) as sbx:
        assert sbx.state == "running"
        r = sbx.exec("echo hello; echo oops >&2; exit 3")
        assert (r.exit_code, r.text, r.stderr_text) == (3, "hello\n", "oops\n")
        assert not r.ok
        r = sbx.exec(["python3", "-c", "import sys; print(sys.stdin.read().upper())"], stdin="abc")
        assert r.ok and r.text == "ABC\n"
        r = sbx.exec("echo $GREETING", env={"GREETING": "hi there"})
        assert r.text == "hi there\n"
        r = sbx.exec("echo started; sleep 30", timeout=0.5)
        assert r.timed_out and r.exit_code is None and not r.ok
        assert r.text == "started\n"

        sbx.files.write("data/in.bin", bytes(range(256)))
        sbx.files.write("run.sh", "#!/bin/sh\necho script\n", mode=0o755)
        assert sbx.files.read("data/in.bin") == bytes(range(256))
        assert sbx.exec("./run.sh").text == "script\n"
        names = {e.name: e for e in sbx.files.list(".")}
        assert names["data"].kind == "dir"
        assert names["run.sh"].kind == "file" and names["run.sh"].mode & 0o111
        with pytest.raises(NotFound):
            sbx.files.read("no/such/file")
        sid = sbx.id
    # The context manager destroyed it.
    assert client.get(sid).state == "destroyed"
    with pytest.raises(InvalidState):
        client.get(sid).exec("true")


def test_streaming_exec_delivers_chunks_in_order(client: Client) -> None:
    with client.create(MANIFEST) as sbx:
        chunks = []
        r = sbx.exec(
            "for i in 1 2 3; do echo line$i; echo err$i >&2; done",
            on_output=chunks.append,
        )
        assert r.exit_code == 0
        out = b"".join(c.data for c in chunks if c.stream == "stdout")
        err = b"".join(c.data for c in chunks if c.stream == "stderr")
        assert out == b"line1\nline2\nline3\n" == r.stdout
        assert err == b"err1\nerr2\nerr3\n" == r.stderr
        stream = sbx.exec_stream(["sh", "-c", "echo a; exit 7"])
        assert b"".join(c.data for c in stream) == b"a\n"
        assert stream.result is not None and stream.result.exit_code == 7


def test_python_session_keeps_variables_across_pause_and_resume(client: Client) -> None:
    with client.create(MANIFEST) as sbx:
        py = sbx.session("python")
        assert py.run("x = 6 * 7\nimport math") == ""
        assert py.run("print(x)") == "42\n"
        with pytest.raises(CodeError) as e:
            py.run("1 / 0")
        assert "ZeroDivisionError" in str(e.value)
        # The session still works after an exception.
        assert py.run("print(x + 1)") == "43\n"

        info = sbx.pause()
        assert info.state == "paused"
        # Any request resumes transparently; the process backend keeps the
        # frozen interpreter's memory while paused.
        assert py.run("print(x, math.pi > 3)") == "42 True\n"
        assert sbx.refresh().state == "running"
        assert any(s.id == py.id and s.running for s in sbx.sessions())

        again = sbx.attach_session(py.id, python=True)
        assert again.run("print(x * 2)") == "84\n"


def test_raw_session_send_and_read(client: Client) -> None:
    with client.create(MANIFEST) as sbx:
        s = sbx.session(["sh"])
        s.send("echo one\n")
        got = b""
        for _ in range(50):
            got += s.read(wait_ms=2000).data
            if b"one\n" in got:
                break
        assert b"one\n" in got
        s.kill()


def test_snapshot_restore_and_fork(client: Client) -> None:
    with client.create(MANIFEST) as sbx:
        sbx.files.write("state.txt", "v1")
        snap = sbx.snapshot()
        assert snap.id.startswith("snap-") and snap.source_sandbox == sbx.id
        sbx.files.write("state.txt", "v2")

        with Sandbox.from_snapshot(snap.id, client=client) as restored:
            assert restored.id != sbx.id
            assert restored.info.source_snapshot == snap.id
            assert restored.files.read_text("state.txt") == "v1"

        children = sbx.fork(2)
        try:
            assert len(children) == 2
            assert len({c.id for c in children} | {sbx.id}) == 3
            for c in children:
                assert c.files.read_text("state.txt") == "v2"
            children[0].files.write("state.txt", "child")
            assert children[1].files.read_text("state.txt") == "v2"
            assert sbx.files.read_text("state.txt") == "v2"
        finally:
            for c in children:
                c.destroy()
        client.delete_snapshot(snap.id)
        with pytest.raises(NotFound):
            client.snapshot(snap.id)


def test_errors_are_mapped_from_codes(client: Client) -> None:
    with pytest.raises(InvalidManifest) as e:
        client.create({"resources": {"cpus": 1, "bogus": 1}})
    assert e.value.code == "invalid_manifest" and e.value.status == 400
    with pytest.raises(NotFound) as nf:
        client.get("sb-00000000000000000000000000000000")
    assert nf.value.status == 404
    with pytest.raises(InvalidArgument):
        client.get("not an id")
    with pytest.raises(NotFound):
        Sandbox.from_snapshot("snap-00000000000000000000000000000000", client=client)
    with client.create(MANIFEST) as sbx:
        sbx.pause()
        with pytest.raises(InvalidState):
            sbx.pause()


def test_runs_idempotent_calls_and_approvals(client: Client) -> None:
    with client.create(MANIFEST) as sbx:
        run = client.runs.create(sbx)
        assert run.status == "running"
        run.step("model_step", {"thought": "append a line"})

        first = run.call("append-1", "echo sent >> outbox", side_effecting=True)
        assert first.outcome == "succeeded" and not first.replayed
        again = run.call("append-1", "echo sent >> outbox", side_effecting=True)
        assert again.outcome == "succeeded" and again.replayed
        assert sbx.files.read_text("outbox") == "sent\n"

        held = run.call(
            "deploy-1", "echo deployed >> outbox", side_effecting=True, requires_approval=True
        )
        assert held.outcome == "awaiting_approval"
        assert client.runs.get(run.id).status == "waiting_approval"
        doc = run.state()
        assert doc["format"] == "stasis.runstate"

        report = client.runs.resume(doc)
        assert report.still_pending == [held.call_id]

        done = run.approve("deploy-1", reason="window open")
        assert done.outcome == "succeeded"
        assert sbx.files.read_text("outbox") == "sent\ndeployed\n"
        # Approving again is refused; the side effect stays single.
        with pytest.raises(InvalidState):
            run.approve("deploy-1")
        assert sbx.files.read_text("outbox") == "sent\ndeployed\n"

        report = client.runs.resume(doc)
        assert report.decided_since == [held.call_id]

        tampered = dict(doc, mac="00" * 32)
        from stasis_client import IntegrityError

        with pytest.raises(IntegrityError):
            client.runs.resume(tampered)
        run.step("completed")
        assert client.runs.get(run.id).status == "completed"
