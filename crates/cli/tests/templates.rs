//! Templates through the real daemon: publish, list, start from, delete
//! over HTTP and the CLI on the process backend; a tenant secret in a file
//! refuses the template; another tenant sees nothing. On the microVM backend
//! (STASIS_IMAGE_DIR set): a warm interpreter's state survives into the
//! sandbox started from the template, and a secret held only in a running
//! session's memory refuses it.

mod common;

use common::{Daemon, Http};
use serde_json::{json, Value};

fn process(extra: Value) -> Value {
    let mut m = json!({"backend": "process", "lifecycle": {"on_idle": "nothing"}});
    for (k, v) in extra.as_object().unwrap() {
        m[k] = v.clone();
    }
    m
}

async fn set_secret(d: &Daemon, name: &str, value: &str) {
    d.http_as(Some(&d.admin_token()))
        .ok(
            "PUT",
            &format!("/v1/admin/tenants/t-default/secrets/{name}"),
            Some(json!({"value": value})),
        )
        .await;
}

async fn snapshot_count(h: &Http) -> usize {
    h.ok("GET", "/v1/snapshots", None)
        .await
        .as_array()
        .unwrap()
        .len()
}

fn stdout(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).to_string()
}

#[tokio::test]
async fn templates_over_http_and_the_cli_on_the_process_backend() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let value = format!("sk-{}", common::unique("tmpl"));
    set_secret(&d, "API_KEY", &value).await;

    let id = h.create(process(json!({"secrets": ["API_KEY"]}))).await;
    h.sh(
        &id,
        "python3 -c \"import json; json.dump(list(range(1000)), open('data.json', 'w'))\"",
    )
    .await;

    // A file holding the secret's value refuses the template; nothing is kept.
    h.sh(&id, "printf 'key=%s\\n' \"$API_KEY\" > leak.txt")
        .await;
    let before = snapshot_count(&h).await;
    let r = h
        .call(
            "POST",
            "/v1/templates",
            Some(json!({"name": "py", "from_sandbox": id})),
        )
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "invalid_state");
    let msg = r.body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("API_KEY") && !msg.contains(&value), "{msg}");
    assert_eq!(
        snapshot_count(&h).await,
        before,
        "the refused snapshot is gone"
    );
    let r = h.call("GET", "/v1/templates/py", None).await;
    assert_eq!(r.status, 404);

    // Without it: published, version 1, under the sandbox's manifest digest.
    h.sh(&id, "rm leak.txt").await;
    let digest = h.state(&id).await["manifest_digest"].clone();
    let t = h
        .ok(
            "POST",
            "/v1/templates",
            Some(json!({"name": "py", "from_sandbox": id})),
        )
        .await;
    assert_eq!(t["reference"], "py:1", "{t}");
    assert_eq!(t["manifest_digest"], digest);
    assert_eq!(t["backend"], "process");

    // Bad input: 400 naming the field.
    for (body, field) in [
        (json!({"name": "Bad Name", "from_sandbox": id}), "name"),
        (
            json!({"name": "ok", "from_sandbox": "../etc"}),
            "from_sandbox",
        ),
    ] {
        let r = h.call("POST", "/v1/templates", Some(body)).await;
        assert_eq!(r.status, 400, "{}", r.body);
        assert_eq!(r.body["error"]["field"], field, "{}", r.body);
    }
    let r = h
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"template": "py:zero"})),
        )
        .await;
    assert_eq!(
        (r.status, r.body["error"]["field"].clone()),
        (400, json!("template"))
    );
    let r = h.call("DELETE", "/v1/templates/py/x", None).await;
    assert_eq!(r.status, 400);
    let r = h
        .call(
            "POST",
            "/v1/templates",
            Some(json!({"name": "ok", "from_sandbox": "sb-nope"})),
        )
        .await;
    assert_eq!(r.status, 404, "{}", r.body);

    // The CLI: create --from, ls, create --template, rm.
    let o = d.cli(&["template", "create", "py", "--from", &id]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "py:2");
    let o = d.cli(&["template", "ls"]);
    assert!(
        stdout(&o).contains("py:1") && stdout(&o).contains("py:2"),
        "{}",
        stdout(&o)
    );
    let o = d.cli(&["create", "--template", "py:1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let child = stdout(&o);
    let n = h
        .sh(
            &child,
            "python3 -c \"import json; print(len(json.load(open('data.json'))))\"",
        )
        .await;
    assert_eq!(n, "1000\n");
    // The secret is still delivered per exec in a sandbox from the template.
    let got = h.sh(&child, "printf %s \"$API_KEY\" | wc -c").await;
    assert_eq!(got.trim(), value.len().to_string());
    let o = d.cli(&["template", "create", "Bad", "--from", &id]);
    assert!(!o.status.success());
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("invalid_argument"), "{}", stderr(&o));

    // A warmed template built from a command: the builder goes afterwards.
    let o = d.cli(&[
        "--json",
        "template",
        "create",
        "warm",
        "--backend",
        "process",
        "--run",
        "python3 -u -i -c \"import json; print('ready')\"",
        "--ready",
        "ready",
    ]);
    assert!(o.status.success(), "{} {}", stdout(&o), stderr(&o));
    let warm: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(warm["reference"], "warm:1");
    let builder = warm["source_sandbox"].as_str().unwrap();
    assert_eq!(h.state(builder).await["state"], "destroyed");
    // A --run that fails says so, and leaves no builder running.
    let o = d.cli(&[
        "template",
        "create",
        "broken",
        "--backend",
        "process",
        "--run",
        "echo nope; exit 3",
    ]);
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("status 3") && stderr(&o).contains("nope"),
        "{}",
        stderr(&o)
    );
    let live = h.ok("GET", "/v1/sandboxes?state=running", None).await;
    assert_eq!(live.as_array().unwrap().len(), 2, "{live}");

    // Another tenant sees none of it.
    let admin = d.http_as(Some(&d.admin_token()));
    admin
        .ok(
            "POST",
            "/v1/admin/tenants",
            Some(json!({"id": "t-other", "name": "o"})),
        )
        .await;
    let tok = admin
        .ok(
            "POST",
            "/v1/admin/tenants/t-other/tokens",
            Some(json!({"name": "x"})),
        )
        .await["token"]
        .as_str()
        .unwrap()
        .to_string();
    let other = d.http_as(Some(&tok));
    assert_eq!(other.ok("GET", "/v1/templates", None).await, json!([]));
    for (m, p, b) in [
        ("GET", "/v1/templates/py", None),
        ("DELETE", "/v1/templates/py", None),
        ("DELETE", "/v1/templates/py/1", None),
        ("POST", "/v1/sandboxes", Some(json!({"template": "py"}))),
    ] {
        let r = other.call(m, p, b).await;
        assert_eq!(r.status, 404, "{m} {p}: {}", r.body);
    }

    // A template's snapshot stays until the template goes.
    let snap = t["snapshot"].as_str().unwrap();
    let r = h
        .call("DELETE", &format!("/v1/snapshots/{snap}"), None)
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
    let o = d.cli(&["template", "rm", "py:1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "py:1 deleted");
    let r = h.call("GET", &format!("/v1/snapshots/{snap}"), None).await;
    assert_eq!(r.status, 404);
    let o = d.cli(&["create", "--template", "py:1"]);
    assert!(
        !o.status.success() && stderr(&o).contains("not_found"),
        "{}",
        stderr(&o)
    );
    let v = h.ok("GET", "/v1/templates/py", None).await;
    assert_eq!(v["latest"], 2, "{v}");
    h.ok("DELETE", "/v1/templates/py", None).await;
    h.ok("DELETE", "/v1/templates/warm", None).await;
    assert_eq!(h.ok("GET", "/v1/templates", None).await, json!([]));
}

fn image_available() -> bool {
    match std::env::var_os("STASIS_IMAGE_DIR") {
        Some(_) => true,
        None => {
            eprintln!("microVM template test NOT RUN: STASIS_IMAGE_DIR is not set (scripts/test.sh sets it)");
            false
        }
    }
}

#[tokio::test]
async fn microvm_template_keeps_a_warm_interpreter_and_refuses_a_secret_in_memory() {
    if !image_available() {
        return;
    }
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let value = format!("sk-{}", common::unique("mem"));
    set_secret(&d, "API_KEY", &value).await;
    let vm = json!({"backend": "microvm", "lifecycle": {"on_idle": "nothing"}});

    // A warm interpreter with state only in its memory.
    let id = h.create(vm.clone()).await;
    let s = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/sessions"),
            Some(json!({"argv": ["python3", "-u", "-i", "-c",
                "data = [i * 2 for i in range(100000)]; print('ready', len(data))"]})),
        )
        .await;
    let sid = s["id"].as_str().unwrap().to_string();
    h.session_until(&id, &sid, 0, "ready 100000").await;
    let t = h
        .ok(
            "POST",
            "/v1/templates",
            Some(json!({"name": "warm-py", "from_sandbox": id})),
        )
        .await;
    assert_eq!(t["backend"], "microvm");
    h.ok("DELETE", &format!("/v1/sandboxes/{id}"), None).await;

    let child = h
        .ok(
            "POST",
            "/v1/sandboxes",
            Some(json!({"template": "warm-py"})),
        )
        .await;
    let cid = child["id"].as_str().unwrap().to_string();
    let sessions = h
        .ok("GET", &format!("/v1/sandboxes/{cid}/sessions"), None)
        .await;
    let restored = sessions
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == sid.as_str() && x["running"] == true)
        .unwrap_or_else(|| panic!("the interpreter session is not in {sessions}"));
    let end = restored["output_end"].as_u64().unwrap();
    h.send(&cid, &sid, "print('sum', sum(data))\n").await;
    h.session_until(
        &cid,
        &sid,
        end,
        &format!("sum {}", 2 * (99_999u64 * 100_000 / 2)),
    )
    .await;
    h.ok("DELETE", &format!("/v1/sandboxes/{cid}"), None).await;

    // A secret only in a running session's environment (guest memory).
    let id = h
        .create({
            let mut m = vm.clone();
            m["secrets"] = json!(["API_KEY"]);
            m
        })
        .await;
    let s = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/sessions"),
            Some(json!({"argv": ["sh", "-c", "echo up; exec sleep 600"]})),
        )
        .await;
    h.session_until(&id, s["id"].as_str().unwrap(), 0, "up")
        .await;
    let before = snapshot_count(&h).await;
    let r = h
        .call(
            "POST",
            "/v1/templates",
            Some(json!({"name": "leaky", "from_sandbox": id})),
        )
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
    let msg = r.body["error"]["message"].as_str().unwrap();
    assert!(msg.contains("API_KEY") && !msg.contains(&value), "{msg}");
    assert_eq!(snapshot_count(&h).await, before);
    h.ok("DELETE", &format!("/v1/sandboxes/{id}"), None).await;
    h.ok("DELETE", "/v1/templates/warm-py", None).await;
}
