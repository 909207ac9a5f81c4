"""What the SDK's own tests need of the stasis provider when they run against
it (imported by the test files ``run.py`` patches; never by the client).

The daemon is the one ``run.py`` started (``STASIS_URL`` and, with tenancy,
``STASIS_TOKEN_FILE``); the backend is ``STASIS_SUITE_BACKEND``.
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any, Optional

from stasis_client import Client
from stasis_client.agents_sdk import StasisSandboxClient, StasisSandboxClientOptions

# Where the SDK tests' mock external tools (git, rclone, cp, ...) appear
# inside the sandbox: the host directory they made, mounted read-only over
# /usr/local/bin, which precedes /usr/bin and /bin on the PATH even of the
# login shells (`sh -lc`) the SDK's mount code runs.
MOCK_BIN = "/usr/local/bin"
TOOL_LOG = "/tmp/sdk-suite-mock-tool-calls.tsv"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def backend() -> str:
    return os.environ.get("STASIS_SUITE_BACKEND", "process")


def _connect() -> dict[str, Any]:
    kw: dict[str, Any] = {"base_url": os.environ["STASIS_URL"]}
    if os.environ.get("STASIS_TOKEN_FILE"):
        kw["token_file"] = os.environ["STASIS_TOKEN_FILE"]
    return kw


def make_client(instrumentation: Any = None) -> StasisSandboxClient:
    """In place of ``UnixLocalSandboxClient(instrumentation=...)``."""
    return StasisSandboxClient(**_connect(), instrumentation=instrumentation)


def run_options(mock_tools: Any = None) -> StasisSandboxClientOptions:
    """The options a run passes: the backend under test, no idle pause
    during the test, and (in place of the host PATH the unix_local test
    prepends) the mock tools mounted and first on the sandbox's PATH."""
    manifest: dict[str, Any] = {
        "backend": backend(),
        "lifecycle": {"on_idle": "nothing"},
    }
    if mock_tools is not None:
        manifest["mounts"] = [{"source": str(mock_tools.bin_dir), "target": MOCK_BIN}]
        manifest["env"] = {"PATH": PATH, "SANDBOX_INTEGRATION_TOOL_LOG": TOOL_LOG}
    return StasisSandboxClientOptions(manifest=manifest)


def sandbox_released(session_state: dict[str, Any]) -> bool:
    """In place of the unix_local check that its host workspace directory is
    gone after the run stopped: the stasis sandbox no longer runs (the
    provider's delete() pauses it; its files wait in the snapshot)."""
    sid: Optional[str] = session_state.get("sandbox_id")  # type: ignore[assignment]
    if not sid:
        return False
    with Client(**_connect()) as c:
        return c.get(sid).state in ("paused", "pausing", "destroyed", "destroying")


async def write_outside_and_link(session: Any, outside_path: Path, symlink_path: Path) -> None:
    """In place of the host-side ``write_text`` + ``symlink_to`` (the
    workspace is inside the sandbox, not on the host)."""
    sbx = await session._inner.stasis_sandbox() if hasattr(session, "_inner") else await session.stasis_sandbox()
    script = (
        f"printf 'outside symlink target\\n' > {shlex.quote(str(outside_path))} && "
        f"ln -s {shlex.quote(str(outside_path))} {shlex.quote(str(symlink_path))}"
    )
    r = await sbx.exec(["/bin/sh", "-c", script])
    assert r.ok, r.stderr_text


async def remove_outside_and_link(session: Any, outside_path: Path, symlink_path: Path) -> None:
    sbx = await session._inner.stasis_sandbox() if hasattr(session, "_inner") else await session.stasis_sandbox()
    await sbx.exec(["/bin/rm", "-f", str(symlink_path), str(outside_path)])
