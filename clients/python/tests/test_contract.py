"""The client's routes and fields against the daemon's own /openapi.json."""

from __future__ import annotations

import copy

import httpx

from stasis_client.contract import ROUTES, check_openapi


def _spec(daemon) -> dict:
    r = httpx.get(daemon.url + "/openapi.json", timeout=30)
    r.raise_for_status()
    return r.json()


def test_client_matches_the_servers_openapi(daemon) -> None:
    problems = check_openapi(_spec(daemon))
    assert problems == [], "\n".join(problems)


def test_drift_is_detected(daemon) -> None:
    spec = _spec(daemon)
    assert check_openapi(spec) == []

    # A renamed response field.
    s = copy.deepcopy(spec)
    props = s["components"]["schemas"]["ExecResponse"]["properties"]
    props["stdout_base64"] = props.pop("stdout_b64")
    assert any("ExecResponse.stdout_b64" in p for p in check_openapi(s))

    # A removed route.
    s = copy.deepcopy(spec)
    del s["paths"]["/v1/sandboxes/{id}/fork"]
    assert any(p.startswith("sandbox.fork:") for p in check_openapi(s))

    # A renamed query parameter.
    s = copy.deepcopy(spec)
    for p in s["paths"]["/v1/sandboxes/{id}/sessions/{session}/output"]["get"]["parameters"]:
        if p["name"] == "wait_ms":
            p["name"] = "wait"
    assert any("'wait_ms'" in p for p in check_openapi(s))

    # A removed request field.
    s = copy.deepcopy(spec)
    del s["components"]["schemas"]["ForkBody"]["properties"]["count"]
    assert any("ForkBody.count" in p for p in check_openapi(s))

    # A changed method.
    s = copy.deepcopy(spec)
    s["paths"]["/v1/sandboxes/{id}/pause"]["put"] = s["paths"]["/v1/sandboxes/{id}/pause"].pop("post")
    assert any(p.startswith("sandbox.pause:") for p in check_openapi(s))

    # A streaming line variant losing a field.
    s = copy.deepcopy(spec)
    for v in s["components"]["schemas"]["ExecStreamLine"]["oneOf"]:
        v.get("properties", {}).pop("data_b64", None)
    assert any("ExecStreamLine.output" in p for p in check_openapi(s))

    # Routes the server adds are not the client's business.
    s = copy.deepcopy(spec)
    s["paths"]["/v1/brand-new"] = {"get": {"responses": {}}}
    assert check_openapi(s) == []


def test_every_client_request_uses_a_declared_route() -> None:
    import inspect

    from stasis_client import _core, aio, agents_sdk, client

    names = set()
    for mod in (_core, client, aio, agents_sdk):
        src = inspect.getsource(mod)
        for part in src.split('req("')[1:]:
            names.add(part.split('"', 1)[0])
    assert names, "no routes found"
    assert names <= set(ROUTES), names - set(ROUTES)
