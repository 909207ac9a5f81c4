"""``git_repo`` manifest entries through the provider: cloned inside the
sandbox by the SDK's own code, through the sandbox's egress policy. The
repository is served by ``git daemon`` on the host's loopback (no public
Internet): the daemon exposes that one port (``--egress-expose``), the
sandbox's policy allows it, and the git configuration in the manifest's
environment sends the entry's ``https://git.fixture.test/...`` URL there
(``url.<base>.insteadOf``)."""

from __future__ import annotations

import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

pytest.importorskip("agents")

from agents.sandbox import Manifest
from agents.sandbox.entries import Dir, GitRepo
from agents.sandbox.errors import GitCloneError, GitMissingInImageError

from conftest import backend_params, running_daemon
from stasis_client.agents_sdk import StasisSandboxClient, StasisSandboxClientOptions

HOST = "git.fixture.test"


def _git(*args: str, cwd: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def git_server() -> Iterator[tuple[int, str, str]]:
    """A bare repository ``team/proj.git`` (branch ``main``: two commits) on
    ``git daemon`` at 127.0.0.1:PORT; yields (port, first commit, head)."""
    root = tempfile.mkdtemp(prefix="stasis-git-fixture-")
    work = os.path.join(root, "work")
    os.makedirs(work)
    _git("init", "-q", "-b", "main", cwd=work)
    Path(work, "README.md").write_text("fixture readme v1\n")
    Path(work, "pkg").mkdir()
    Path(work, "pkg", "module.py").write_text("VALUE = 'v1'\n")
    _git("add", ".", cwd=work)
    _git("commit", "-q", "-m", "one", cwd=work)
    first = _git("rev-parse", "HEAD", cwd=work)
    Path(work, "README.md").write_text("fixture readme v2\n")
    _git("commit", "-q", "-am", "two", cwd=work)
    head = _git("rev-parse", "HEAD", cwd=work)
    bare = os.path.join(root, "team", "proj.git")
    _git("clone", "-q", "--bare", work, bare, cwd=root)
    _git("config", "uploadpack.allowAnySHA1InWant", "true", cwd=bare)
    port = _free_port()
    proc = subprocess.Popen(
        ["git", "daemon", "--reuseaddr", "--export-all", f"--base-path={root}",
         "--listen=127.0.0.1", f"--port={port}", root],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline, "git daemon did not listen"
            time.sleep(0.05)
    try:
        yield port, first, head
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        subprocess.run(["rm", "-rf", root], check=False)


@pytest.fixture(scope="module")
def git_daemon(git_server):
    port = git_server[0]
    yield from running_daemon(["--egress-expose", f"127.0.0.1:{port}"])


def _environment(port: int) -> dict:
    # git's own configuration through the environment: the entry's URL
    # (https://git.fixture.test/team/proj.git) goes to the fixture.
    return {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"url.git://127.0.0.1:{port}/.insteadOf",
        "GIT_CONFIG_VALUE_0": f"https://{HOST}/",
    }


@pytest.mark.parametrize("backend", backend_params())
async def test_git_repo_entries_are_cloned_in_the_sandbox_through_its_egress(
    git_daemon, git_server, backend
) -> None:
    port, first, head = git_server
    provider = StasisSandboxClient(**git_daemon.connect_kwargs())
    options = StasisSandboxClientOptions(
        manifest={"backend": backend, "network": {"allow": [f"127.0.0.1:{port}"]},
                  "lifecycle": {"idle_timeout_secs": 600}},
        on_delete="destroy",
    )
    manifest = Manifest(
        entries={
            "repo": GitRepo(host=HOST, repo="team/proj", ref="main"),
            "old": GitRepo(host=HOST, repo="team/proj", ref=first),
            "nested": Dir(children={"pkg": GitRepo(host=HOST, repo="team/proj", ref="main", subpath="pkg")}),
        },
        environment={"value": _environment(port)},
    )
    session = await provider.create(manifest=manifest, options=options)
    try:
        try:
            await session.start()
        except GitMissingInImageError:
            pytest.skip(f"the {backend} sandbox's image has no git")
        read = lambda p: session.read(Path(p))  # noqa: E731
        assert (await read("repo/README.md")).read() == b"fixture readme v2\n"
        assert (await read("repo/pkg/module.py")).read() == b"VALUE = 'v1'\n"
        assert (await read("old/README.md")).read() == b"fixture readme v1\n"
        assert (await read("nested/pkg/module.py")).read() == b"VALUE = 'v1'\n"
        r = await session.exec("git -C repo rev-parse HEAD; git -C old rev-parse HEAD; test ! -e nested/pkg/README.md")
        assert r.exit_code == 0, r.stderr
        assert r.stdout.decode().split() == [head, first]
    finally:
        await provider.delete(session)


@pytest.mark.parametrize("backend", ["process"])
async def test_git_repo_outside_the_egress_policy_fails_to_clone(git_daemon, git_server, backend) -> None:
    port = git_server[0]
    provider = StasisSandboxClient(**git_daemon.connect_kwargs())
    options = StasisSandboxClientOptions(
        manifest={"backend": backend, "lifecycle": {"idle_timeout_secs": 600}}, on_delete="destroy"
    )
    manifest = Manifest(
        entries={"repo": GitRepo(host=HOST, repo="team/proj", ref="main")},
        environment={"value": _environment(port)},
    )
    session = await provider.create(manifest=manifest, options=options)
    try:
        with pytest.raises(GitCloneError):
            await session.start()
    finally:
        await provider.delete(session)
