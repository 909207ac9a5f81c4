"""Not from upstream: the sandbox-URL mode's port routing. A data-plane
request naming a port other than envd's is relayed into the sandbox by the
daemon's port proxy, with the sandbox's access token, which it then does
not pass on; without the token it is refused."""

import os
import time

import httpx

from e2b import Sandbox


def test_other_ports_are_relayed_with_the_access_token(sandbox: Sandbox):
    sandbox.files.write("served/hello.txt", "hello from the sandbox")
    sandbox.commands.run("cd served && exec python3 -m http.server 8123", background=True)
    url = os.environ["E2B_SANDBOX_URL"] + "/hello.txt"
    headers = {"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": "8123"}
    denied = httpx.get(url, headers=headers, timeout=30)
    assert denied.status_code == 401
    token = {"X-Access-Token": sandbox._envd_access_token}
    for _ in range(100):  # until the server listens (the proxy also waits)
        r = httpx.get(url, headers={**headers, **token}, timeout=30)
        if r.status_code != 502:
            break
        time.sleep(0.2)
    assert r.status_code == 200
    assert r.text == "hello from the sandbox"
    # Another sandbox's token does not open this one.
    other = Sandbox.create("base")
    try:
        r = httpx.get(url, headers={**headers, "X-Access-Token": other._envd_access_token}, timeout=30)
        assert r.status_code == 401
    finally:
        other.kill()


def test_envd_health_and_envs(sandbox: Sandbox):
    base = os.environ["E2B_SANDBOX_URL"]
    h = {"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": "49983", "X-Access-Token": sandbox._envd_access_token}
    assert httpx.get(base + "/health", headers=h, timeout=30).status_code == 204
    envs = httpx.get(base + "/envs", headers=h, timeout=30)
    assert envs.status_code == 200 and isinstance(envs.json(), dict)
    # The binary protobuf codec is refused with a Connect error, not a 500.
    r = httpx.post(base + "/process.Process/List", headers={**h, "Content-Type": "application/proto"}, content=b"", timeout=30)
    assert r.status_code == 501
    assert r.json()["code"] == "unimplemented"
