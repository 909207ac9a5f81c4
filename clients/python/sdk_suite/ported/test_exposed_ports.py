"""The SDK's exposed-port tests on a provider (tests/sandbox/test_exposed_ports.py),
run on the stasis provider. One field differs by design: the endpoint's port is the
local relay's (stasis serves a sandbox port through a signed URL on the daemon, which
the relay turns into the SDK's host:port with the app at /), not the sandbox port
itself; the other assertions are upstream's."""

from __future__ import annotations

import pytest

from agents.sandbox.errors import ExposedPortUnavailableError

pytestmark = pytest.mark.asyncio


async def test_resolve_exposed_port_uses_wrapper_and_normalizes_state(box) -> None:
    session = await box.sdk_session(box / "ws", exposed_ports=(8765, 8765))
    try:
        endpoint = await session.resolve_exposed_port(8765)
    finally:
        await session.aclose()
        await session._inner.close_port_relays()
    assert session.state.exposed_ports == (8765,)
    assert (endpoint.host, endpoint.tls) == ("127.0.0.1", False)
    assert endpoint.url_for("ws") == f"ws://127.0.0.1:{endpoint.port}/"


async def test_resolve_exposed_port_rejects_undeclared_ports(box) -> None:
    session = await box.sdk_session(box / "ws", exposed_ports=(8765,))
    try:
        with pytest.raises(ExposedPortUnavailableError) as exc_info:
            await session.resolve_exposed_port(9000)
    finally:
        await session.aclose()
    assert exc_info.value.context["reason"] == "not_configured"
    assert exc_info.value.context["exposed_ports"] == [8765]
