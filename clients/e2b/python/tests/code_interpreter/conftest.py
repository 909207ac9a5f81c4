"""Fixtures of the code interpreter's tests: upstream's names (`sandbox`,
`async_sandbox`) made with `e2b_code_interpreter`'s Sandbox, whose default
template `code-interpreter-v1` is the image `stasis-code-interpreter`.

The daemon and the E2B environment come from the parent conftest. The
image must be built (scripts/build-code-interpreter.sh, run by
scripts/setup.sh --tests) beside the guest image; without it every test here
is skipped, saying so.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import pytest_asyncio


def _image_built() -> bool:
    img = os.environ.get("STASIS_IMAGE_DIR")
    return bool(img) and (Path(img).parent / "code-interpreter" / "rootfs").is_dir()


def pytest_collection_modifyitems(config, items):
    if _image_built():
        return
    skip = pytest.mark.skip(
        reason="no stasis-code-interpreter image (scripts/build-code-interpreter.sh)"
    )
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(skip)


@pytest.fixture()
def sandbox(request, sandbox_test_id):
    from e2b_code_interpreter import Sandbox

    sbx = Sandbox.create(metadata={"sandbox_test_id": sandbox_test_id})
    yield sbx
    try:
        sbx.kill()
    except Exception as e:  # the test may have killed it
        print(f"\n[TEARDOWN] {sbx.sandbox_id}: {e!r}")


@pytest_asyncio.fixture
async def async_sandbox(sandbox_test_id):
    from e2b_code_interpreter import AsyncSandbox

    sbx = await AsyncSandbox.create(metadata={"sandbox_test_id": sandbox_test_id})
    yield sbx
    results = await asyncio.gather(sbx.kill(), return_exceptions=True)
    if isinstance(results[0], BaseException):
        print(f"\n[TEARDOWN] {sbx.sandbox_id}: {results[0]!r}")
