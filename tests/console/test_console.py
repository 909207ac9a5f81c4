"""The console in a real browser: sign-in, approvals, sandboxes, files,
snapshots, tenancy, CSRF, the terminal, the live feed, accessibility."""

from __future__ import annotations

import uuid

from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys


def held_call(api, run: str, key: str, argv: list[str]) -> dict:
    """A side-effecting tool call held for approval, asked for by "billing-agent"."""
    r = api.http.post(f"/v1/runs/{run}/tool-calls", headers={"x-stasis-actor": "billing-agent"},
                      json={"idempotency_key": key, "argv": argv, "side_effecting": True, "requires_approval": True})
    assert r.status_code == 202, r.text
    return r.json()


def card_for(b, call_id: str):
    return b.one(f'article.approval[data-call="{call_id}"]')


def test_bad_token_is_refused(daemon, browser):
    b = browser
    b.open(daemon.url + "/ui")
    b.one("#login-token").send_keys("stk_" + "A" * 43)
    b.one("#login-form button[type=submit]").click()
    err = b.wait(lambda d: b.css("#login-error")[0].text or None, what="sign-in error")
    assert "not valid" in err
    assert not b.css("#nav")[0].is_displayed()
    assert b.d.get_cookie("stasis_session") is None
    # The typed token is gone from the field, the URL and the page's storage.
    assert b.one("#login-token").get_attribute("value") == ""
    assert "stk_" not in b.d.current_url
    b.shot()


def test_sign_in_sets_a_strict_http_only_session_and_signs_out(daemon, browser):
    b = browser
    token = daemon.token()
    b.sign_in(daemon.url, token, "alice")
    c = b.d.get_cookie("stasis_session")
    assert c and c["httpOnly"] and c["sameSite"] == "Strict" and c.get("expiry")
    assert token not in b.d.current_url
    js_visible = b.d.execute_script(
        "return document.cookie + JSON.stringify(localStorage) + JSON.stringify(sessionStorage)")
    assert "stasis_session" not in js_visible and token not in js_visible
    assert "alice" in b.one("#who-text").text
    b.shot("signed-in")
    # Sign out: the cookie is cleared and the session no longer works.
    b.one("#logout").click()
    b.wait(lambda d: b.css("#login")[0].is_displayed(), what="login form")
    status = b.d.execute_script("return fetch('/v1/sandboxes').then(r => r.status)")
    assert status == 401


def test_approve_one_reject_another(daemon, browser, api):
    b = browser
    sb = api.sandbox()
    run = api.call("POST", "/v1/runs", {"sandbox": sb})["id"]
    ok = held_call(api, run, "pay-1", ["sh", "-c", "echo paid >> /tmp/approved.log"])["call"]["id"]
    no = held_call(api, run, "pay-2", ["sh", "-c", "echo paid >> /tmp/rejected.log"])["call"]["id"]
    b.sign_in(daemon.url, daemon.token(), "finance-director")
    b.go(daemon.url, "#/approvals")
    card = card_for(b, ok)
    assert "echo paid >> /tmp/approved.log" in card.text and "pay-1" in card.text
    assert "billing-agent" in card.text
    b.shot("pending")
    card.find_element(By.CSS_SELECTOR, "textarea").send_keys("invoice 42 checked")
    card.find_element(By.CSS_SELECTOR, "button[data-action=approve]").click()
    b.wait(lambda d: not b.css(f'article.approval[data-call="{ok}"]'), what="approved card gone")
    # A rejection needs a reason.
    card = card_for(b, no)
    card.find_element(By.CSS_SELECTOR, "button[data-action=reject]").click()
    assert "reason is required" in card.find_element(By.CSS_SELECTOR, ".error").text
    card.find_element(By.CSS_SELECTOR, "textarea").send_keys("duplicate payment")
    card.find_element(By.CSS_SELECTOR, "button[data-action=reject]").click()
    b.wait(lambda d: not b.css(f'article.approval[data-call="{no}"]'), what="rejected card gone")
    decided = b.one(f'tr[data-call="{no}"]').text
    assert "rejected" in decided and "finance-director" in decided and "duplicate payment" in decided
    b.shot("decided")
    # The run state: the approved call ran once, the rejected one never.
    state = api.call("GET", f"/v1/runs/{run}")
    calls = {c["id"]: c for c in state["tool_calls"]}
    assert calls[ok]["state"] == "succeeded" and calls[no]["state"] == "rejected"
    decisions = {a["call"]: a["decision"] for a in state["approvals"]}
    assert decisions[ok]["by"] == "finance-director" and decisions[ok]["approved"]
    assert decisions[no]["reason"] == "duplicate payment" and not decisions[no]["approved"]
    # A retry with the approved call's key replays its result; nothing runs again.
    again = api.call("POST", f"/v1/runs/{run}/tool-calls", {"idempotency_key": "pay-1", "side_effecting": True,
                     "requires_approval": True, "argv": ["sh", "-c", "echo paid >> /tmp/approved.log"]})
    assert again["replayed"]
    r = api.http.get(f"/v1/sandboxes/{sb}/files", params={"path": "/tmp/approved.log"})
    assert r.status_code == 200 and r.text == "paid\n"
    assert api.http.get(f"/v1/sandboxes/{sb}/files", params={"path": "/tmp/rejected.log"}).status_code == 404
    # The run page highlights the rejected call.
    b.go(daemon.url, f"#/run/{run}")
    row = b.one(f'tr[data-call="{no}"]')
    assert "bad" in row.get_attribute("class")
    b.shot("run")


def test_keyboard_only_approval_and_labels(daemon, browser, api):
    b = browser
    sb = api.sandbox()
    run = api.call("POST", "/v1/runs", {"sandbox": sb})["id"]
    call = held_call(api, run, "kb-1", ["echo", "keyboard"])["call"]["id"]
    b.open(daemon.url + "/ui")
    # Sign in with the keyboard alone.
    active = lambda: b.d.switch_to.active_element  # noqa: E731
    b.wait(lambda d: active().get_attribute("id") == "login-token", what="token field focused")
    active().send_keys(daemon.token())
    active().send_keys(Keys.TAB)
    active().send_keys("kb-user")
    active().send_keys(Keys.ENTER)
    b.wait(lambda d: b.css("#nav")[0].is_displayed(), what="signed in")
    b.go(daemon.url, "#/approvals")
    card_for(b, call)
    # Every form control has a label.
    unlabelled = b.d.execute_script("""
        return [...document.querySelectorAll('input, textarea, select')]
          .filter(e => e.type !== 'hidden' && e.offsetParent !== null)
          .filter(e => !(e.labels && e.labels.length) && !e.getAttribute('aria-label'))
          .map(e => e.outerHTML)""")
    assert unlabelled == []
    # Tab to the reason, type it, tab to Approve, press Enter.
    textarea_id = card_for(b, call).find_element(By.CSS_SELECTOR, "textarea").get_attribute("id")
    b.d.execute_script("document.activeElement && document.activeElement.blur()")
    for _ in range(150):
        active().send_keys(Keys.TAB)
        if active().get_attribute("id") == textarea_id:
            break
    else:
        raise AssertionError("the reason field cannot be reached with Tab")
    active().send_keys("approved from the keyboard")
    active().send_keys(Keys.TAB)
    assert active().get_attribute("data-action") == "approve"
    b.shot("focused")
    active().send_keys(Keys.ENTER)
    b.wait(lambda d: not b.css(f'article.approval[data-call="{call}"]'), what="card gone")
    state = api.call("GET", f"/v1/runs/{run}")
    assert state["tool_calls"][0]["state"] == "succeeded"
    assert state["approvals"][0]["decision"]["by"] == "kb-user"


def test_pause_and_resume_a_sandbox(daemon, browser, api):
    b = browser
    sb = api.sandbox()
    b.sign_in(daemon.url, daemon.token())
    b.go(daemon.url, "#/sandboxes")
    b.one(f'tr[data-id="{sb}"] a').click()
    # The idle countdown runs from the last activity (10 minutes here).
    assert "pause in 9m" in b.one("#deadlines").text or "pause in 10m" in b.one("#deadlines").text
    b.one("button[data-action=pause]").click()
    b.wait(lambda d: b.css("button[data-action=resume]"), what="paused")
    assert api.call("GET", f"/v1/sandboxes/{sb}")["state"] == "paused"
    assert "destroyed (TTL) in" in b.one("#deadlines").text
    b.shot("paused")
    b.one("button[data-action=resume]").click()
    b.wait(lambda d: b.css("button[data-action=pause]"), what="running again")
    assert api.call("GET", f"/v1/sandboxes/{sb}")["state"] == "running"
    b.shot("running")


def test_browse_and_download_a_file(daemon, browser, api):
    b = browser
    sb = api.sandbox()
    r = api.http.put(f"/v1/sandboxes/{sb}/files", params={"path": "/tmp/report/summary.txt"}, content=b"totals: 42\n")
    assert r.status_code == 204, r.text
    b.sign_in(daemon.url, daemon.token())
    b.go(daemon.url, f"#/sandbox/{sb}")
    field = b.one("#files-path")
    field.clear()
    field.send_keys("/tmp" + Keys.ENTER)
    b.one('tr[data-name="report"] button').click()
    link = b.one('tr[data-name="summary.txt"] a.download')
    b.shot("browser")
    link.click()
    target = b.downloads / "summary.txt"
    b.wait(lambda d: target.exists() and target.read_bytes() == b"totals: 42\n", timeout=30, what="download")


def test_restore_a_snapshot(daemon, browser, api):
    b = browser
    sb = api.sandbox()
    api.http.put(f"/v1/sandboxes/{sb}/files", params={"path": "/tmp/keep.txt"}, content=b"kept")
    snap = api.call("POST", f"/v1/sandboxes/{sb}/snapshots", {})["id"]
    b.sign_in(daemon.url, daemon.token())
    b.go(daemon.url, "#/snapshots")
    row = b.one(f'tr[data-id="{snap}"]')
    b.shot("list")
    row.find_element(By.CSS_SELECTOR, "button[data-action=restore]").click()
    b.wait(lambda d: "#/sandbox/" in d.current_url, timeout=60, what="restored sandbox page")
    new = b.d.current_url.rsplit("/", 1)[-1]
    b.wait(lambda d: b.css("#page-sandbox h1") and b.css("#page-sandbox h1")[0].text == new, what="sandbox page")
    rec = api.call("GET", f"/v1/sandboxes/{new}")
    assert rec["source_snapshot"] == snap and rec["state"] == "running"
    assert api.http.get(f"/v1/sandboxes/{new}/files", params={"path": "/tmp/keep.txt"}).text == "kept"
    b.shot("restored")


def test_another_tenants_ids_are_not_found(daemon, browser, other_api):
    b = browser
    theirs = other_api.sandbox()
    their_run = other_api.call("POST", "/v1/runs", {"sandbox": theirs})["id"]
    b.sign_in(daemon.url, daemon.token())
    for page in (f"#/sandbox/{theirs}", f"#/run/{their_run}"):
        b.go(daemon.url, page)
        h = b.one("#view h1")
        assert h.text == "Not found", page
        assert "not_found" in b.one("#view .error").text
    b.shot()
    # Through the API with the session too, reading and acting alike.
    codes = b.d.execute_script("""
        return (async () => {
          const csrf = (await (await fetch('/ui/session')).json()).csrf;
          const g = await fetch(arguments[0]);
          const p = await fetch(arguments[0] + '/pause', {method: 'POST', headers: {'x-csrf-token': csrf}});
          return [g.status, p.status];
        })();""", f"/v1/sandboxes/{theirs}")
    assert codes == [404, 404]
    assert theirs not in b.d.execute_script("return fetch('/v1/sandboxes').then(r => r.text())")
    assert other_api.call("GET", f"/v1/sandboxes/{theirs}")["state"] == "running"


def test_csrf_and_admin_pages(daemon, browser, api):
    b = browser
    sb = api.sandbox()
    b.sign_in(daemon.url, daemon.token())
    # A state-changing request with the cookie but without the CSRF token is refused.
    status = b.d.execute_script(
        "return fetch(arguments[0], {method: 'POST'}).then(r => r.status)", f"/v1/sandboxes/{sb}/pause")
    assert status == 403
    assert api.call("GET", f"/v1/sandboxes/{sb}")["state"] == "running"
    # Nor the port proxy: a page a sandbox serves must not act with the session.
    status = b.d.execute_script("return fetch(arguments[0]).then(r => r.status)", f"/v1/sandboxes/{sb}/ports/8080/")
    assert status == 403
    # A tenant session cannot use the admin API.
    assert b.d.execute_script("return fetch('/v1/admin/tenants').then(r => r.status)") == 403
    b.go(daemon.url, "#/admin")
    assert b.one("#view h1").text == "Error"
    b.one("#logout").click()
    b.wait(lambda d: b.css("#login")[0].is_displayed(), what="login form")
    # An admin session sees the admin pages (and no tenant's sandboxes).
    b.sign_in(daemon.url, daemon.token("admin.token"), "operator")
    b.go(daemon.url, "#/admin")
    assert b.one("#view h1").text == "Admin"
    assert "t-default" in b.one("#view table").text
    assert b.d.execute_script("return fetch('/v1/sandboxes').then(r => r.status)") == 403
    b.shot("admin")


def test_terminal_runs_a_command(daemon, browser, api):
    b = browser
    sb = api.sandbox()
    b.sign_in(daemon.url, daemon.token())
    b.go(daemon.url, f"#/terminal/{sb}")
    b.wait(lambda d: "attached" in b.one("#page-terminal [role=status]").text, what="attached")
    line = b.one("#term-line")
    line.send_keys("echo hello-$((40+2))" + Keys.ENTER)
    b.wait(lambda d: "hello-42" in b.one("#term-out").text, what="command output")
    b.shot()


def test_live_updates_audit_and_metrics(daemon, browser, api):
    b = browser
    b.sign_in(daemon.url, daemon.token())
    b.go(daemon.url, "#/approvals")
    b.wait(lambda d: "on" in (b.one("#live").get_attribute("class") or ""), what="event feed connected")
    sb = api.sandbox()
    run = api.call("POST", "/v1/runs", {"sandbox": sb})["id"]
    call = held_call(api, run, f"live-{uuid.uuid4().hex[:6]}", ["echo", "live"])["call"]["id"]
    # The new pending action shows up without a reload.
    card_for(b, call)
    badge = b.one("#pending-badge")
    b.wait(lambda d: badge.is_displayed() and int(badge.text) >= 1, what="badge")
    b.shot("approvals")
    api.call("POST", f"/v1/runs/{run}/approvals/{call}/reject", {"reason": "cleanup"})
    b.go(daemon.url, "#/audit")
    assert "intact" in b.one("#audit-verify").text
    b.one("#f-target").send_keys(run)
    b.wait(lambda d: all(run in r.text for r in b.css("#view tbody tr")) and b.css("#view tbody tr"), what="filtered")
    b.shot("audit")
    b.go(daemon.url, "#/metrics")
    b.one("svg.chart")
    assert "Idle ratio" in b.one("#idle-ratio").text
    b.shot("metrics")


def test_phone_layout(daemon, browser, api):
    b = browser
    b.d.set_window_size(390, 844)
    sb = api.sandbox()
    run = api.call("POST", "/v1/runs", {"sandbox": sb})["id"]
    call = held_call(api, run, "phone-1", ["curl", "-X", "POST", "https://bank.example/transfer"])["call"]["id"]
    b.sign_in(daemon.url, daemon.token(), "finance-director")
    fits = "return document.documentElement.scrollWidth <= window.innerWidth + 1"
    # Nothing wider than the screen but the scrollable tables.
    b.go(daemon.url, "#/approvals")
    card_for(b, call)
    assert b.d.execute_script(fits)
    b.shot("approvals")
    b.go(daemon.url, "#/sandboxes")
    b.one("#view table")
    assert b.d.execute_script(fits)
    b.shot("sandboxes")
    api.call("POST", f"/v1/runs/{run}/approvals/{call}/reject", {"reason": "test over"})
