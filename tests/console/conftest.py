"""Browser tests of the web console: the real daemon on loopback (process
backend) and Debian's headless Chromium driven by Selenium.

Every test saves a screenshot into ``$STASIS_CONSOLE_SHOTS`` (default: a
temporary directory); ``scripts/console-screenshots.sh`` points it at
docs/src/console/ to refresh the committed ones.
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
from typing import Iterator, Optional

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
SHOTS = Path(os.environ.get("STASIS_CONSOLE_SHOTS") or tempfile.mkdtemp(prefix="stasis-console-shots-"))


def stasis_bin() -> str:
    b = os.environ.get("STASIS_BIN") or str(REPO / "target" / "debug" / "stasis")
    if not Path(b).is_file():
        pytest.exit(f"stasis binary not found at {b} (build it, or set STASIS_BIN)", returncode=2)
    return b


class Daemon:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="stasis-console-"))
        self.cgroup_parent = f"stasis-console-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.proc: Optional[subprocess.Popen[bytes]] = None
        self.url = ""

    def start(self) -> None:
        ready = self.dir / "ready"
        log = open(self.dir / "daemon.log", "ab")
        cmd = [stasis_bin(), "serve", "--data-dir", str(self.dir), "--listen", "127.0.0.1:0",
               "--insecure-dev-key", "--ready-file", str(ready), "--cgroup-parent", self.cgroup_parent]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                     env={**os.environ, "RUST_LOG": "info"})
        deadline = time.monotonic() + 60
        while not (ready.exists() and ready.read_text().strip()):
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode}: {self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"daemon did not start: {self.log()}")
            time.sleep(0.05)
        self.url = "http://" + ready.read_text().strip()
        while True:
            try:
                if httpx.get(self.url + "/healthz", timeout=5).status_code == 200 and (self.dir / "token").exists():
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"daemon does not answer: {self.log()}")
            time.sleep(0.05)

    def token(self, name: str = "token") -> str:
        return (self.dir / name).read_text().strip()

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
        subprocess.run(["sh", "-c", f"for d in /sys/fs/cgroup/{self.cgroup_parent} /sys/fs/cgroup/*/{self.cgroup_parent}; do "
                        f"[ -d \"$d\" ] && find \"$d\" -depth -type d -exec rmdir {{}} \\; 2>/dev/null; done; true"])
        shutil.rmtree(self.dir, ignore_errors=True)


class Api:
    """The JSON API with one token (to set up and to check what the console did)."""

    def __init__(self, url: str, token: str) -> None:
        self.http = httpx.Client(base_url=url, headers={"authorization": f"Bearer {token}"}, timeout=120)

    def call(self, method: str, path: str, body=None, expect: tuple = (200, 201, 202, 204)):
        r = self.http.request(method, path, json=body)
        assert r.status_code in expect, f"{method} {path}: {r.status_code} {r.text}"
        return r.json() if r.content and r.headers.get("content-type", "").startswith("application/json") else r

    def sandbox(self) -> str:
        # A long idle timeout: the pages act on a running sandbox.
        m = {"backend": "process", "lifecycle": {"idle_timeout_secs": 600}}
        return self.call("POST", "/v1/sandboxes", {"manifest": m})["id"]

    def destroy_all(self) -> None:
        for s in self.call("GET", "/v1/sandboxes"):
            if s["state"] not in ("destroyed", "failed"):
                self.http.delete(f"/v1/sandboxes/{s['id']}")


@pytest.fixture(scope="session")
def daemon() -> Iterator[Daemon]:
    d = Daemon()
    d.start()
    try:
        yield d
    finally:
        try:
            Api(d.url, d.token()).destroy_all()
        finally:
            d.stop()


@pytest.fixture(scope="session")
def api(daemon: Daemon) -> Api:
    return Api(daemon.url, daemon.token())


@pytest.fixture(scope="session")
def admin_api(daemon: Daemon) -> Api:
    return Api(daemon.url, daemon.token("admin.token"))


@pytest.fixture(scope="session")
def other_api(daemon: Daemon, admin_api: Api) -> Api:
    """A second tenant's API (for the cross-tenant checks)."""
    admin_api.call("POST", "/v1/admin/tenants", {"id": "t-other", "name": "Other"})
    tok = admin_api.call("POST", "/v1/admin/tenants/t-other/tokens", {"name": "other"})["token"]
    a = Api(daemon.url, tok)
    yield a
    a.destroy_all()


CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", "--window-size=1280,1000"]


@pytest.fixture
def browser(request) -> Iterator["Browser"]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="stasis-chromium-")
    downloads = tempfile.mkdtemp(prefix="stasis-downloads-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = os.environ.get("STASIS_CHROMIUM", "/usr/bin/chromium")
    for f in CHROME_FLAGS + [f"--user-data-dir={profile}"]:
        opts.add_argument(f)
    opts.add_experimental_option("prefs", {"download.default_directory": downloads,
                                           "download.prompt_for_download": False})
    service = Service(executable_path=os.environ.get("STASIS_CHROMEDRIVER", "/usr/bin/chromedriver"))
    driver = webdriver.Chrome(service=service, options=opts)
    driver.set_page_load_timeout(60)
    driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": downloads})
    b = Browser(driver, Path(downloads), request.node.name)
    try:
        yield b
    finally:
        if b.shots == 0:
            try:
                b.shot()
            except Exception:
                pass
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
        shutil.rmtree(downloads, ignore_errors=True)


class Browser:
    def __init__(self, driver, downloads: Path, name: str) -> None:
        self.d = driver
        self.downloads = downloads
        self.name = name
        self.shots = 0

    def shot(self, label: str = "") -> Path:
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.shots += 1
        p = SHOTS / f"{self.name}{'-' + label if label else ''}.png"
        self.d.save_screenshot(str(p))
        return p

    def open(self, url: str) -> None:
        self.d.get(url)

    def wait(self, cond, timeout: float = 20, what: str = "condition"):
        from selenium.webdriver.support.ui import WebDriverWait

        return WebDriverWait(self.d, timeout).until(lambda d: cond(d), message=f"waiting for {what}")

    def css(self, sel: str):
        from selenium.webdriver.common.by import By

        return self.d.find_elements(By.CSS_SELECTOR, sel)

    def one(self, sel: str, timeout: float = 20):
        return self.wait(lambda d: (self.css(sel) or [None])[0], timeout, sel)

    def sign_in(self, base: str, token: str, actor: str = "") -> None:
        self.open(base + "/ui")
        self.one("#login-token").send_keys(token)
        if actor:
            self.one("#login-actor").send_keys(actor)
        self.one("#login-form button[type=submit]").click()
        self.wait(lambda d: self.css("#nav") and self.css("#nav")[0].is_displayed(), what="signed in")
        self.wait(lambda d: d.execute_script("return document.body.dataset.ready || ''"), what="first page")

    def go(self, base: str, hash_: str) -> None:
        """Show a page and wait until it has rendered (after any earlier one)."""
        before = self.d.execute_script("return document.body.dataset.ready || ''")
        self.d.execute_script(
            "if (location.hash === arguments[0]) App.route(); else location.hash = arguments[0];", hash_)
        self.wait(lambda d: d.execute_script("return document.body.dataset.ready || ''") != before, what=hash_)
