#!/usr/bin/env python3
"""Run the OpenAI Agents SDK's own sandbox tests against the stasis provider.

    python clients/python/sdk_suite/run.py [--backend process|microvm|all]

1. Fetches the sdist of the openai-agents version clients/python/pyproject.toml
   pins (``pip download``, cached in ``<repo>/.cache/sdk_suite``, which git
   ignores: no fetched code is committed).
2. Extracts ``tests/sandbox/integration_tests/test_runner_pause_resume.py``
   (with ``_helpers.py``, ``test_model.py`` and the ``tests/test_responses.py``
   it imports), written for the SDK's unix_local provider.
3. Applies only provider-specific edits, each an exact text replacement that
   must match (so an SDK change that moves them fails loudly instead of
   silently running something else): the client (stasis instead of
   unix_local), the run's options (backend; the mock tools mounted on the
   sandbox's PATH instead of the host's), the backend id and snapshot type
   the state must carry, and the host-path checks (the workspace lives in
   the sandbox, so its files are made there and "the workspace is released"
   means the sandbox no longer runs). Every behavioural assertion is kept.
4. Runs it with pytest against a daemon it starts on loopback, on each
   backend asked for (microVM when ``STASIS_IMAGE_DIR`` names a guest image),
   and prints a pass/fail table, then ``N passed, N failed`` (skips are
   named, not counted as failures).

Exit status: 0 when nothing failed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
PY = HERE.parent
REPO = PY.parents[1]
CACHE = REPO / ".cache" / "sdk_suite"

INTEGRATION = "tests/sandbox/integration_tests"
FILES = [
    "tests/__init__.py",
    "tests/test_responses.py",
    "tests/sandbox/__init__.py",
    f"{INTEGRATION}/__init__.py",
    f"{INTEGRATION}/_helpers.py",
    f"{INTEGRATION}/test_model.py",
    f"{INTEGRATION}/test_runner_pause_resume.py",
]

# (file, old, new, why): the provider-specific edits. Each `old` must occur
# exactly `count` times.
EDITS: list[tuple[str, str, str, str, int]] = [
    (
        "test_runner_pause_resume.py",
        "from agents.sandbox.sandboxes.unix_local import UnixLocalSandboxClient\n",
        "from stasis_suite_provider import make_client, run_options, sandbox_released\n",
        "the provider under test",
        1,
    ),
    (
        "test_runner_pause_resume.py",
        "client = UnixLocalSandboxClient(",
        "client = make_client(",
        "the provider under test",
        1,
    ),
    (
        "test_runner_pause_resume.py",
        "run_config=RunConfig(sandbox=SandboxRunConfig(client=client)),",
        "run_config=RunConfig(\n            sandbox=SandboxRunConfig(client=client, options=run_options(mock_tools))\n        ),",
        "the backend, and the mock tools on the sandbox's PATH (unix_local: the host's)",
        2,
    ),
    (
        "test_runner_pause_resume.py",
        'assert state._sandbox["backend_id"] == "unix_local"',
        'assert state._sandbox["backend_id"] == "stasis"',
        "backend id",
        1,
    ),
    (
        "test_runner_pause_resume.py",
        'assert snapshot["type"] == "local"',
        'assert snapshot["type"] == "stasis"',
        "snapshot type (a native stasis snapshot, not a local tar)",
        1,
    ),
    (
        "test_runner_pause_resume.py",
        'assert session_state["workspace_root_owned"] is True\n',
        'assert isinstance(session_state["sandbox_id"], str)\n',
        "unix_local owns a host directory; stasis owns a sandbox",
        1,
    ),
    (
        "test_runner_pause_resume.py",
        "    assert not workspace_root.exists()\n",
        "    assert sandbox_released(session_state)\n",
        "host-path check: the workspace is released (the sandbox no longer runs)",
        2,
    ),
    (
        "_helpers.py",
        '    outside_path.write_text("outside symlink target\\n", encoding="utf-8")\n'
        "    symlink_path.symlink_to(outside_path)\n",
        "    from stasis_suite_provider import write_outside_and_link\n\n"
        "    await write_outside_and_link(session, outside_path, symlink_path)\n",
        "host-path check: the file and the symlink are made inside the sandbox",
        1,
    ),
    (
        "_helpers.py",
        "        symlink_path.unlink(missing_ok=True)\n        outside_path.unlink(missing_ok=True)\n",
        "        from stasis_suite_provider import remove_outside_and_link\n\n"
        "        await remove_outside_and_link(session, outside_path, symlink_path)\n",
        "host-path check: removed inside the sandbox",
        1,
    ),
]

CONFTEST = '''
import pytest


def pytest_configure(config):
    for m in ("review_optional", "requires_native_macos_sandbox"):
        config.addinivalue_line("markers", f"{m}: SDK marker")
'''


def pinned_version() -> str:
    text = (PY / "pyproject.toml").read_text()
    m = re.search(r'"openai-agents==([^"]+)"', text)
    if not m:
        sys.exit("sdk_suite: no pinned openai-agents version in clients/python/pyproject.toml")
    return m.group(1)


def fetch_sdist(version: str) -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    name = f"openai_agents-{version}.tar.gz"
    sdist = CACHE / name
    if not sdist.exists():
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
             "-q", "-d", str(CACHE), f"openai-agents=={version}"],
            check=True,
        )
    if not sdist.exists():
        sys.exit(f"sdk_suite: pip did not leave {sdist}")
    return sdist


def prepare(version: str) -> Path:
    """The patched test tree; returns its root (to put on sys.path)."""
    sdist = fetch_sdist(version)
    work = CACHE / f"work-{version}"
    shutil.rmtree(work, ignore_errors=True)
    prefix = f"openai_agents-{version}/"
    with tarfile.open(sdist) as tar:
        for rel in FILES:
            member = tar.getmember(prefix + rel)
            data = tar.extractfile(member)
            assert data is not None
            out = work / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(data.read())
    for fname, old, new, why, count in EDITS:
        p = work / INTEGRATION / fname
        text = p.read_text()
        n = text.count(old)
        if n != count:
            sys.exit(f"sdk_suite: edit ({why}) expects {count} match(es) in {fname}, found {n}")
        p.write_text(text.replace(old, new))
    (work / "conftest.py").write_text(CONFTEST)
    shutil.copy(HERE / "stasis_suite_provider.py", work / "stasis_suite_provider.py")
    return work


class Daemon:
    def __init__(self, bin_path: str, allow: Path) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="stasis-sdk-suite-"))
        self.cgroup_parent = f"stasis-sdk-suite-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        ready = self.dir / "ready"
        self.log = open(self.dir / "daemon.log", "ab")
        cmd = [bin_path, "serve", "--data-dir", str(self.dir), "--listen", "127.0.0.1:0",
               "--insecure-dev-key", "--accel", "tcg", "--ready-file", str(ready),
               "--cgroup-parent", self.cgroup_parent, "--allow-mount", str(allow)]
        image = os.environ.get("STASIS_IMAGE_DIR")
        if image:
            # STASIS_IMAGE_DIR names one image ("default"); the daemon wants its parent.
            cmd += ["--images", str(Path(image).parent)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=self.log, stderr=self.log)
        deadline = time.monotonic() + 60
        while not (ready.exists() and ready.read_text().strip()):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"sdk_suite: the daemon did not start: {self.tail()}")
            time.sleep(0.05)
        self.url = "http://" + ready.read_text().strip()

    def env(self) -> dict[str, str]:
        e = {"STASIS_URL": self.url}
        if (self.dir / "token").exists():
            e["STASIS_TOKEN_FILE"] = str(self.dir / "token")
        return e

    def tail(self) -> str:
        try:
            return (self.dir / "daemon.log").read_text()[-3000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        sys.path.insert(0, str(PY / "tests"))
        try:
            from conftest import cleanup_cgroups  # the client tests' own cleanup

            cleanup_cgroups(self.cgroup_parent)
        except Exception:
            pass
        shutil.rmtree(self.dir, ignore_errors=True)


def run_backend(work: Path, backend: str, bin_path: str, timeout: int) -> list[tuple[str, str, str]]:
    base = Path(tempfile.mkdtemp(prefix="sdk-suite-tmp-"))
    d = Daemon(bin_path, base)
    junit = base / "junit.xml"
    try:
        env = {**os.environ, **d.env(), "STASIS_SUITE_BACKEND": backend,
               "PYTHONPATH": os.pathsep.join([str(work), os.environ.get("PYTHONPATH", "")])}
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o",
               "asyncio_mode=auto", "--rootdir", str(work), "--basetemp", str(base / "pt"),
               f"--junitxml={junit}", str(work / INTEGRATION / "test_runner_pause_resume.py")]
        try:
            r = subprocess.run(cmd, cwd=work, env=env, timeout=timeout, capture_output=True, text=True)
            out = r.stdout + r.stderr
        except subprocess.TimeoutExpired as e:
            out = f"timed out after {timeout}s\n{e.stdout or ''}"
        rows = []
        if junit.exists():
            for case in ET.parse(junit).getroot().iter("testcase"):
                name = case.get("name", "?")
                status, why = "pass", ""
                for tag in ("failure", "error", "skipped"):
                    el = case.find(tag)
                    if el is not None:
                        status = "skip" if tag == "skipped" else "FAIL"
                        why = (el.get("message") or "").splitlines()[0][:160] if el.get("message") else tag
                rows.append((name, status, why))
        if not rows:
            rows.append(("(collection)", "FAIL", out.strip().splitlines()[-1][:160] if out.strip() else "no output"))
        if any(s == "FAIL" for _, s, _ in rows):
            print(out[-6000:], file=sys.stderr)
            print(f"--- daemon log ({backend}) ---\n{d.tail()}", file=sys.stderr)
        return rows
    finally:
        d.stop()
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["process", "microvm", "all"], default="all")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per backend")
    ap.add_argument("--fetch-only", action="store_true", help="only download the sdist (set-up)")
    a = ap.parse_args()
    if a.fetch_only:
        print(f"sdk_suite: {fetch_sdist(pinned_version())}")
        return 0
    bin_path = os.environ.get("STASIS_BIN") or str(REPO / "target" / "debug" / "stasis")
    if not Path(bin_path).is_file():
        sys.exit(f"sdk_suite: no stasis binary at {bin_path} (build it or set STASIS_BIN)")
    version = pinned_version()
    work = prepare(version)
    backends = ["process", "microvm"] if a.backend == "all" else [a.backend]
    table: list[tuple[str, str, str, str]] = []
    for b in backends:
        image = os.environ.get("STASIS_IMAGE_DIR")
        if b == "microvm" and not (image and (Path(image) / "vmlinux").exists()):
            table.append((b, "test_runner_pause_resume (all)", "skip", "no guest image (STASIS_IMAGE_DIR)"))
            continue
        for name, status, why in run_backend(work, b, bin_path, a.timeout):
            table.append((b, name, status, why))
    print(f"\nopenai-agents {version} sandbox integration test against stasis:")
    print(f"{'backend':8} {'result':6} test")
    for b, name, status, why in table:
        print(f"{b:8} {status:6} {name}" + (f"  ({why})" if why else ""))
    passed = sum(1 for r in table if r[2] == "pass")
    failed = sum(1 for r in table if r[2] == "FAIL")
    skipped = sum(1 for r in table if r[2] == "skip")
    print(f"sdk-suite: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
