"""Test harness: the real ``stasis`` daemon on a temporary data dir, on loopback.

The binary is ``$STASIS_BIN``, else ``<repo>/target/debug/stasis`` (what
scripts/test.sh builds). The client authenticates with the token the daemon
writes to ``<data-dir>/token`` when it has one (multi-tenant daemons), and
sends no token to a daemon that does not write one.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Iterator, Optional, Sequence

import httpx
import pytest

REPO = Path(__file__).resolve().parents[3]


def stasis_bin() -> str:
    b = os.environ.get("STASIS_BIN") or str(REPO / "target" / "debug" / "stasis")
    if not Path(b).is_file():
        pytest.exit(f"stasis binary not found at {b} (build it, or set STASIS_BIN)", returncode=2)
    return b


def microvm_image() -> Optional[str]:
    """The guest image the microVM tests use (``$STASIS_IMAGE_DIR``), if built."""
    img = os.environ.get("STASIS_IMAGE_DIR")
    return img if img and (Path(img) / "vmlinux").is_file() else None


def backend_params() -> list:
    """``process``, and ``microvm`` (skipped without a guest image)."""
    return [
        "process",
        pytest.param(
            "microvm",
            marks=pytest.mark.skipif(microvm_image() is None, reason="no STASIS_IMAGE_DIR guest image"),
        ),
    ]


class Daemon:
    def __init__(self, extra_args: Sequence[str] = ()) -> None:
        self.extra_args = list(extra_args)
        self.dir = Path(tempfile.mkdtemp(prefix="stasis-py-"))
        self.cgroup_parent = f"stasis-py-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.url = ""

    def start(self) -> None:
        ready = self.dir / "ready"
        log = open(self.dir / "daemon.log", "ab")
        cmd = [
            stasis_bin(),
            "serve",
            "--data-dir",
            str(self.dir),
            "--listen",
            "127.0.0.1:0",
            "--insecure-dev-key",
            "--accel",
            "tcg",
            "--ready-file",
            str(ready),
            "--cgroup-parent",
            self.cgroup_parent,
            "--webhook-allow",
            "127.0.0.1",
        ]
        if microvm_image() is not None:
            # STASIS_IMAGE_DIR names one image ("default"); the daemon wants its parent.
            cmd += ["--images", str(Path(microvm_image()).parent)]
        cmd += self.extra_args
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env={**os.environ, "RUST_LOG": "info"}
        )
        deadline = time.monotonic() + 60
        while True:
            if ready.exists() and ready.read_text().strip():
                self.url = "http://" + ready.read_text().strip()
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode}: {self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"daemon did not start: {self.log()}")
            time.sleep(0.05)
        # Wait until it answers (and, with tenancy, has written its token).
        while True:
            try:
                if httpx.get(self.url + "/healthz", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"daemon does not answer: {self.log()}")
            time.sleep(0.05)

    @property
    def token_file(self) -> Optional[Path]:
        p = self.dir / "token"
        return p if p.exists() else None

    def connect_kwargs(self) -> dict:
        kw: dict = {"base_url": self.url}
        if self.token_file is not None:
            kw["token_file"] = str(self.token_file)
        return kw

    def env(self) -> dict[str, str]:
        e = {"STASIS_URL": self.url}
        if self.token_file is not None:
            e["STASIS_TOKEN_FILE"] = str(self.token_file)
        return e

    def log(self) -> str:
        try:
            return (self.dir / "daemon.log").read_text()[-4000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        cleanup_cgroups(self.cgroup_parent)
        shutil.rmtree(self.dir, ignore_errors=True)


CGROUP_ROOTS = ("memory", "pids", "cpu", "cpuacct", "freezer", "cpu,cpuacct", "unified")


def cleanup_cgroups(parent: str) -> None:
    """Kill whatever is left in this daemon's cgroups and remove them."""
    roots = [Path("/sys/fs/cgroup") / c for c in CGROUP_ROOTS]
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        roots.append(Path("/sys/fs/cgroup"))
    for root in roots:
        top = root / parent
        if not top.is_dir():
            continue
        dirs = [top] + [Path(d) / n for d, ns, _ in os.walk(top) for n in ns]
        for _ in range(50):
            pids = []
            for d in dirs:
                try:
                    pids += (d / "cgroup.procs").read_text().split()
                except OSError:
                    pass
                for f, v in (("freezer.state", "THAWED"), ("cgroup.freeze", "0")):
                    try:
                        (d / f).write_text(v)
                    except OSError:
                        pass
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
            time.sleep(0.02)
        for d in reversed(dirs):
            try:
                d.rmdir()
            except OSError:
                pass


def running_daemon(extra_args: Sequence[str] = ()) -> Iterator[Daemon]:
    """A started daemon; on exit, what the tests left is destroyed (so no
    sandbox process outlives the daemon) and the daemon stopped."""
    d = Daemon(extra_args)
    d.start()
    try:
        yield d
    finally:
        try:
            from stasis_client import Client

            with Client(**d.connect_kwargs()) as c:
                for s in c.list():
                    if s.state not in ("destroyed", "failed"):
                        try:
                            c.get(s.id).destroy()
                        except Exception:
                            pass
        finally:
            d.stop()


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    yield from running_daemon()


def run_phase(daemon: Daemon, script: Path, *args: str) -> dict:
    """Run one phase of a scripted agent flow in a new Python process against
    ``daemon`` (no model key, no tracing) and return its last JSON line."""
    import json
    import sys

    env = {**os.environ, **daemon.env(), "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    env.pop("OPENAI_API_KEY", None)
    p = subprocess.run(
        [sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=600
    )
    assert p.returncode == 0, f"{args[0]} failed:\n{p.stdout}\n{p.stderr[-6000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.fixture
def client(daemon: Daemon):
    from stasis_client import Client

    with Client(**daemon.connect_kwargs()) as c:
        yield c
