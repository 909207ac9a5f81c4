"""Harness of the E2B SDK's own tests, ported onto a stasis daemon.

One real daemon per session (``clients/python/tests``' ``running_daemon``,
on loopback), and the environment a user sets to switch from E2B (the
README's block): ``E2B_API_URL`` and ``E2B_SANDBOX_URL`` at ``/e2b`` of the
daemon, ``E2B_API_KEY`` the hex of the daemon's tenant token. The fixtures
keep upstream's names (``sandbox``, ``sandbox_factory``, ``async_sandbox``,
``async_sandbox_factory``, ``template``, ``sandbox_test_id``, ``debug``,
``helpers``, ``test_api_key``) so ported tests change only in how a sandbox
is made.

Backends: the daemon's default backend is the process backend; with
``STASIS_E2B_BACKEND=microvm`` (and a guest image in ``STASIS_IMAGE_DIR``)
it is the microVM and only the tests marked ``microvm`` run (the bounded
subset).
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import random
import string
from pathlib import Path
from typing import Any, Iterator

import pytest
import pytest_asyncio

_spec = importlib.util.spec_from_file_location(
    "stasis_client_tests_harness",
    Path(__file__).resolve().parents[3] / "python" / "tests" / "conftest.py",
)
assert _spec is not None and _spec.loader is not None
harness = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(harness)

BACKEND = os.environ.get("STASIS_E2B_BACKEND", "process")


def e2b_env(url: str, token: str) -> dict[str, str]:
    """What the README's ``export E2B_...`` block sets, for a daemon at ``url``."""
    return {
        "E2B_API_URL": f"{url}/e2b",
        "E2B_SANDBOX_URL": f"{url}/e2b",
        "E2B_API_KEY": "e2b_" + token.encode().hex(),
    }


def pytest_collection_modifyitems(config, items):
    if BACKEND == "microvm":
        if harness.microvm_image() is None:
            skip = pytest.mark.skip(reason="no STASIS_IMAGE_DIR guest image")
            for item in items:
                item.add_marker(skip)
            return
        skip = pytest.mark.skip(reason="outside the bounded microVM subset")
        for item in items:
            if item.get_closest_marker("microvm") is None:
                item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def daemon() -> Iterator[Any]:
    if BACKEND == "microvm":
        os.environ["STASIS_DEFAULT_BACKEND"] = "microvm"
    for d in harness.running_daemon():
        token = (d.dir / "token").read_text().strip()
        saved = {k: os.environ.get(k) for k in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY", "E2B_DEBUG")}
        os.environ.pop("E2B_DEBUG", None)
        os.environ.update(e2b_env(d.url, token))
        try:
            yield d
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@pytest.fixture
def test_api_key() -> str:
    """A key of the right shape for tests that never reach a server."""
    return "e2b_" + "0" * 40


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item._test_failed = rep.failed


def _random(n: int = 8) -> str:
    return "".join(random.choices(string.ascii_lowercase + string.digits, k=n))


@pytest.fixture()
def sandbox_test_id() -> str:
    return f"test_{_random()}"


@pytest.fixture()
def template() -> str:
    return "base"


@pytest.fixture()
def sandbox_factory(request, template, sandbox_test_id):
    from e2b import Sandbox

    made: list = []

    def factory(*, template_name: str = template, **kwargs):
        kwargs.setdefault("metadata", {}).setdefault("sandbox_test_id", sandbox_test_id)
        sbx = Sandbox.create(template_name, **kwargs)
        made.append(sbx)
        return sbx

    yield factory
    for sbx in made:
        if getattr(request.node, "_test_failed", False):
            print(f"\n[TEST FAILED] Sandbox ID: {sbx.sandbox_id}")
        try:
            sbx.kill()
        except Exception as e:  # the test may have killed it
            print(f"\n[TEARDOWN] {sbx.sandbox_id}: {e!r}")


@pytest.fixture()
def sandbox(sandbox_factory):
    return sandbox_factory()


@pytest_asyncio.fixture
async def async_sandbox_factory(request, template, sandbox_test_id):
    from e2b import AsyncSandbox

    made: list = []

    async def factory(*, template_name: str = template, **kwargs):
        kwargs.setdefault("metadata", {}).setdefault("sandbox_test_id", sandbox_test_id)
        sbx = await AsyncSandbox.create(template_name, **kwargs)
        made.append(sbx)
        return sbx

    yield factory
    results = await asyncio.gather(*(s.kill() for s in made), return_exceptions=True)
    for sbx, r in zip(made, results):
        if isinstance(r, BaseException):
            print(f"\n[TEARDOWN] {sbx.sandbox_id}: {r!r}")


@pytest_asyncio.fixture
async def async_sandbox(async_sandbox_factory):
    return await async_sandbox_factory()


@pytest.fixture
def debug() -> bool:
    return os.getenv("E2B_DEBUG") is not None


@pytest.fixture(autouse=True)
def skip_by_debug(request, debug):
    if request.node.get_closest_marker("skip_debug") and debug:
        pytest.skip("skipped because E2B_DEBUG is set")


class Helpers:
    @staticmethod
    def check_cmd_exit_error(cmd) -> None:
        from e2b import CommandExitException

        try:
            cmd.wait()
        except CommandExitException as e:
            raise AssertionError(f"command failed with exit code {e.exit_code}: {e.stderr}")

    @staticmethod
    def catch_cmd_exit_error_in_background(cmd):
        from e2b import CommandExitException

        disabled = False

        async def wait_for_exit():
            try:
                await cmd.wait()
            except CommandExitException as e:
                if not disabled:
                    raise AssertionError(f"command failed with exit code {e.exit_code}: {e.stderr}")

        asyncio.create_task(wait_for_exit())

        def disable():
            nonlocal disabled
            disabled = True

        return disable


@pytest.fixture
def helpers():
    return Helpers
