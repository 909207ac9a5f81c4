//! The file API beyond whole files, end to end on the process backend:
//! stat / exists / remove / mkdir / rename, ranged reads (query and Range
//! header), create-exclusive writes, a write through a symlink to a
//! directory not made yet, watching a directory; and the sandbox listing's
//! labels, filters and pages, and the lifecycle change (audited).

mod common;

use common::{Daemon, Http};
use serde_json::{json, Value};
use std::time::Duration;

fn manifest() -> Value {
    json!({"backend": "process", "lifecycle": {"on_idle": "nothing"}})
}

#[tokio::test]
async fn file_operations() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let id = h.create(manifest()).await;
    let f = |q: &str| format!("/v1/sandboxes/{id}/files{q}");

    // Create-exclusive.
    let r = h
        .raw(
            "PUT",
            &f("?path=a.txt&exclusive=true"),
            b"0123456789".to_vec(),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = h
        .raw("PUT", &f("?path=a.txt&exclusive=true"), b"x".to_vec())
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "already_exists");
    assert_eq!(h.sh(&id, "cat a.txt").await, "0123456789");

    // Ranged reads.
    let (s, b) = h
        .bytes("GET", &f("?path=a.txt&offset=2&length=3"), vec![])
        .await;
    assert_eq!((s, b.as_slice()), (206, &b"234"[..]));
    let r =
        h.c.get(format!("{}{}", h.base, f("?path=a.txt")))
            .header("range", "bytes=-4")
            .send()
            .await
            .unwrap();
    assert_eq!(r.status().as_u16(), 206);
    assert_eq!(r.headers()["content-range"], "bytes 6-9/10");
    assert_eq!(r.bytes().await.unwrap().as_ref(), b"6789");
    let (s, _) = h.bytes("GET", &f("?path=a.txt&offset=50"), vec![]).await;
    assert_eq!(s, 416);

    // Stat / exists.
    let st = h.ok("GET", &f("/stat?path=a.txt"), None).await;
    assert_eq!(
        (st["kind"].as_str(), st["size"].as_u64()),
        (Some("file"), Some(10))
    );
    assert_eq!(st["path"], "/workspace/a.txt");
    let e = h.ok("GET", &f("/exists?path=nope"), None).await;
    assert_eq!(e["exists"], false);
    let r = h.call("GET", &f("/stat?path=nope"), None).await;
    assert_eq!(r.status, 404);

    // Mkdir, rename, remove.
    let r = h
        .call(
            "POST",
            &f("/mkdir"),
            Some(json!({"path": "d/e/f", "parents": true})),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = h
        .call("POST", &f("/mkdir"), Some(json!({"path": "d"})))
        .await;
    assert_eq!(r.body["error"]["code"], "already_exists");
    let r = h
        .call(
            "POST",
            &f("/rename"),
            Some(json!({"from": "a.txt", "to": "d/e/b.txt"})),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(h.sh(&id, "cat d/e/b.txt").await, "0123456789");
    let r = h.call("DELETE", &f("?path=d"), None).await;
    assert_eq!(r.status, 409, "{}", r.body);
    let r = h.call("DELETE", &f("?path=d&recursive=true"), None).await;
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(h.sh(&id, "test -e d && echo yes || echo no").await, "no\n");

    // A symlink to a directory not made yet: the write makes it.
    h.sh(&id, "ln -s /workspace/real alias").await;
    let r = h
        .raw("PUT", &f("?path=alias/internal/x"), b"1".to_vec())
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(h.sh(&id, "cat /workspace/real/internal/x").await, "1");
    let st = h.ok("GET", &f("/stat?path=alias"), None).await;
    assert_eq!(
        (st["kind"].as_str(), st["symlink_target"].as_str()),
        (Some("symlink"), Some("/workspace/real"))
    );

    // Nothing leaves the root: an absolute link to the host's /etc
    // resolves inside the sandbox, and `..` is refused.
    let r = h.call("DELETE", &f("?path=../../.."), None).await;
    assert_eq!(r.status, 400, "{}", r.body);
    h.sh(&id, "ln -s / up && mkdir -p /hostcheck").await;
    let r = h
        .call(
            "POST",
            &f("/rename"),
            Some(json!({"from": "up/hostcheck", "to": "moved"})),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(
        h.sh(&id, "test -d /workspace/moved && echo ok").await,
        "ok\n"
    );
}

/// The same operations in a microVM (the guest agent does them).
#[tokio::test]
async fn file_operations_microvm() {
    if std::env::var_os("STASIS_IMAGE_DIR").is_none() {
        eprintln!(
            "microVM file test NOT RUN: STASIS_IMAGE_DIR is not set (scripts/test.sh sets it)"
        );
        return;
    }
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let id = h
        .create(json!({"backend": "microvm", "lifecycle": {"on_idle": "nothing"}}))
        .await;
    let f = |q: &str| format!("/v1/sandboxes/{id}/files{q}");
    let r = h
        .raw(
            "PUT",
            &f("?path=a.txt&exclusive=true"),
            b"0123456789".to_vec(),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = h
        .raw("PUT", &f("?path=a.txt&exclusive=true"), b"x".to_vec())
        .await;
    assert_eq!(r.body["error"]["code"], "already_exists", "{}", r.body);
    let (s, b) = h
        .bytes("GET", &f("?path=a.txt&offset=7&length=10"), vec![])
        .await;
    assert_eq!((s, b.as_slice()), (206, &b"789"[..]));
    let st = h.ok("GET", &f("/stat?path=a.txt"), None).await;
    assert_eq!(st["size"], 10);
    let r = h
        .call(
            "POST",
            &f("/mkdir"),
            Some(json!({"path": "d/e", "parents": true})),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = h
        .call(
            "POST",
            &f("/rename"),
            Some(json!({"from": "a.txt", "to": "d/e/b"})),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    let r = h.call("DELETE", &f("?path=d"), None).await;
    assert_eq!(r.status, 409, "{}", r.body);
    let r = h.call("DELETE", &f("?path=d&recursive=true"), None).await;
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(
        h.ok("GET", &f("/exists?path=d"), None).await["exists"],
        false
    );
    h.sh(&id, "ln -s /workspace/real alias").await;
    let r = h
        .raw("PUT", &f("?path=alias/internal/x"), b"1".to_vec())
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(h.sh(&id, "cat /workspace/real/internal/x").await, "1");
    // The guest agent's watch: polled scans (changes within one scan
    // interval coalesce), renames paired by inode.
    h.sh(&id, "mkdir -p /workspace/w").await;
    let mut resp = open_watch(&h, &id, "w").await;
    h.sh(
        &id,
        "echo hi > w/a; sleep 0.5; mv w/a w/c; sleep 0.5; rm w/c",
    )
    .await;
    let events = read_events(&mut resp, "removed").await;
    let has = |kind: &str, path: &str| has_event(&events, kind, path);
    assert!(has("created", "a"), "{events:?}");
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "renamed" && e["to"] == "c"),
        "{events:?}"
    );
    assert!(has("removed", "c"), "{events:?}");
    drop(resp);
    h.ok("DELETE", &format!("/v1/sandboxes/{id}"), None).await;
}

/// The sandbox's own mounts through the file API: a remove or rename of,
/// onto or across one (its root, /proc, /dev) answers 409 `mount_point`
/// and the sandbox keeps every mount; a directory onto a file is 409
/// `already_exists`; a range ending at the largest u64 is served to the
/// end of the file; an upload over the limit names the setting.
async fn mounts_ranges_and_limits(h: &Http, id: &str) {
    let f = |q: &str| format!("/v1/sandboxes/{id}/files{q}");
    let mounts = "cut -d' ' -f5 /proc/self/mountinfo | sort; test -c /dev/null && echo null-ok";
    let before = h.sh(id, mounts).await;
    assert!(
        before.contains("/proc\n") && before.contains("null-ok"),
        "{before}"
    );
    h.sh(
        id,
        "mkdir -p /workspace/empty && printf 0123456789 > /workspace/file",
    )
    .await;
    let refused = [
        ("DELETE", f("?path=/proc"), None),
        ("DELETE", f("?path=/proc&recursive=true"), None),
        ("DELETE", f("?path=/dev&recursive=true"), None),
        ("DELETE", f("?path=/&recursive=true"), None),
        (
            "POST",
            f("/rename"),
            Some(json!({"from": "/proc", "to": "/moved-proc"})),
        ),
        (
            "POST",
            f("/rename"),
            Some(json!({"from": "/dev", "to": "/workspace/dev"})),
        ),
        (
            "POST",
            f("/rename"),
            Some(json!({"from": "/workspace/empty", "to": "/dev"})),
        ),
        (
            "POST",
            f("/rename"),
            Some(json!({"from": "/workspace/file", "to": "/dev/file"})),
        ),
        (
            "POST",
            f("/rename"),
            Some(json!({"from": "/", "to": "/workspace/root"})),
        ),
    ];
    for (m, path, body) in refused {
        let r = h.call(m, &path, body.clone()).await;
        assert_eq!(r.status, 409, "{m} {path} {body:?}: {}", r.body);
        assert_eq!(
            r.body["error"]["code"], "mount_point",
            "{m} {path} {body:?}: {}",
            r.body
        );
    }
    let r = h
        .call("POST", &f("/mkdir"), Some(json!({"path": "/proc"})))
        .await;
    assert_eq!(r.body["error"]["code"], "already_exists", "{}", r.body);
    assert_eq!(
        h.sh(id, mounts).await,
        before,
        "a mount of the sandbox changed"
    );
    assert_eq!(h.sh(id, "cat /workspace/file").await, "0123456789");

    // A directory does not replace a file.
    let r = h
        .call(
            "POST",
            &f("/rename"),
            Some(json!({"from": "/workspace/empty", "to": "/workspace/file"})),
        )
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "already_exists", "{}", r.body);

    // A range end past the file (the largest u64) is the file's end.
    for (range, want, body) in [
        (
            "bytes=0-18446744073709551615",
            "bytes 0-9/10",
            &b"0123456789"[..],
        ),
        ("bytes=7-18446744073709551615", "bytes 7-9/10", b"789"),
        (
            "bytes=0-18446744073709551614",
            "bytes 0-9/10",
            b"0123456789",
        ),
    ] {
        let r =
            h.c.get(format!("{}{}", h.base, f("?path=/workspace/file")))
                .header("range", range)
                .send()
                .await
                .unwrap();
        assert_eq!(r.status().as_u16(), 206, "{range}");
        assert_eq!(r.headers()["content-range"], want, "{range}");
        assert_eq!(r.bytes().await.unwrap().as_ref(), body, "{range}");
    }

    // Over the limit (1 MiB here): 413 naming the setting; nothing written.
    let r = h
        .raw("PUT", &f("?path=big"), vec![7u8; (1 << 20) + 1])
        .await;
    assert_eq!(r.status, 413, "{}", r.body);
    let msg = r.body["error"]["message"].as_str().unwrap_or_default();
    assert!(msg.contains("--max-file-mb"), "{msg}");
    assert_eq!(h.sh(id, "test -e big && echo yes || echo no").await, "no\n");
    // Up to the limit, written whole (received to disk, copied in pieces).
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i % 253) as u8).collect();
    let r = h.raw("PUT", &f("?path=big"), data.clone()).await;
    assert_eq!(r.status, 204, "{}", r.body);
    let (s, b) = h.bytes("GET", &f("?path=big"), vec![]).await;
    assert_eq!((s, b.len()), (200, data.len()));
    assert!(b == data, "the upload came back different");
}

#[tokio::test]
async fn mount_points_ranges_and_limits() {
    let d = Daemon::start(&["--max-file-mb", "1"]).await;
    let h = d.http();
    let id = h.create(manifest()).await;
    mounts_ranges_and_limits(&h, &id).await;
}

#[tokio::test]
async fn mount_points_ranges_and_limits_microvm() {
    if std::env::var_os("STASIS_IMAGE_DIR").is_none() {
        eprintln!(
            "microVM mount test NOT RUN: STASIS_IMAGE_DIR is not set (scripts/test.sh sets it)"
        );
        return;
    }
    let d = Daemon::start(&["--max-file-mb", "1"]).await;
    let h = d.http();
    let id = h
        .create(json!({"backend": "microvm", "lifecycle": {"on_idle": "nothing"}}))
        .await;
    mounts_ranges_and_limits(&h, &id).await;
    h.ok("DELETE", &format!("/v1/sandboxes/{id}"), None).await;
}

#[tokio::test]
async fn watch_streams_events() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let id = h.create(manifest()).await;
    h.sh(&id, "mkdir -p /workspace/w").await;
    let mut resp = open_watch(&h, &id, "w").await;
    h.sh(
        &id,
        "echo hi > w/a && mkdir w/sub && sleep 0.5 && echo x > w/sub/b && mv w/a w/c && rm w/c",
    )
    .await;
    let events = read_events(&mut resp, "removed").await;
    let has = |kind: &str, path: &str| has_event(&events, kind, path);
    assert!(has("created", "a"), "{events:?}");
    assert!(has("modified", "a"), "{events:?}");
    assert!(has("created", "sub/b"), "{events:?}");
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "renamed" && e["path"] == "a" && e["to"] == "c"),
        "{events:?}"
    );
    assert!(has("removed", "c"), "{events:?}");
}

/// A watch of `dir` in sandbox `id`, answered 200 and left streaming.
async fn open_watch(h: &Http, id: &str, dir: &str) -> reqwest::Response {
    let url = format!("{}/v1/sandboxes/{id}/files/watch?path={dir}", h.base);
    let resp = h.c.get(url).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    resp
}

/// Whether `events` hold one of `kind` for `path`.
fn has_event(events: &[Value], kind: &str, path: &str) -> bool {
    events
        .iter()
        .any(|e| e["kind"] == kind && e["path"] == path)
}

/// NDJSON events of a watch until one of `kind` arrives (10 s at most).
async fn read_events(resp: &mut reqwest::Response, kind: &str) -> Vec<Value> {
    let mut buf = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !buf.contains(&format!("\"{kind}\"")) {
        let chunk = tokio::time::timeout_at(deadline, resp.chunk())
            .await
            .unwrap_or_else(|_| panic!("no {kind} event in time: {buf}"))
            .unwrap()
            .expect("stream open");
        buf.push_str(&String::from_utf8_lossy(&chunk));
    }
    buf.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[tokio::test]
async fn labels_pages_and_lifecycle() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let t0 = h.ok("GET", "/v1/sandboxes", None).await;
    assert!(t0.as_array().unwrap().is_empty());
    let mut ids = Vec::new();
    for i in 0..3 {
        let v = h
            .ok(
                "POST",
                "/v1/sandboxes",
                Some(json!({"manifest": manifest(), "labels": {"team": if i == 1 { "b" } else { "a" }, "n": i.to_string()}})),
            )
            .await;
        assert_eq!(v["labels"]["n"], i.to_string());
        ids.push(v["id"].as_str().unwrap().to_string());
    }
    let r = h
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"labels": {"bad key": "x"}})),
        )
        .await;
    assert_eq!(
        (r.status, r.body["error"]["field"].as_str()),
        (400, Some("labels"))
    );

    let a = h.ok("GET", "/v1/sandboxes?label=team=a", None).await;
    assert_eq!(a.as_array().unwrap().len(), 2);
    let a = h
        .ok("GET", "/v1/sandboxes?label=team=a,n=2&state=running", None)
        .await;
    assert_eq!(a[0]["id"], ids[2]);
    let got = h
        .ok("GET", &format!("/v1/sandboxes/{}", ids[1]), None)
        .await;
    assert_eq!(got["labels"]["team"], "b");

    // Pages of two.
    let r =
        h.c.get(format!("{}/v1/sandboxes?limit=2", h.base))
            .send()
            .await
            .unwrap();
    let cursor = r.headers()["x-next-cursor"].to_str().unwrap().to_string();
    let first: Value = r.json().await.unwrap();
    assert_eq!(first.as_array().unwrap().len(), 2);
    let r =
        h.c.get(format!("{}/v1/sandboxes?limit=2&cursor={cursor}", h.base))
            .send()
            .await
            .unwrap();
    assert!(r.headers().get("x-next-cursor").is_none());
    let second: Value = r.json().await.unwrap();
    assert_eq!(second[0]["id"], ids[2]);
    let created = first[1]["created_at_ms"].as_i64().unwrap();
    let after = h
        .ok(
            "GET",
            &format!("/v1/sandboxes?created_after={created}"),
            None,
        )
        .await;
    assert!(after.as_array().unwrap().iter().all(|s| s["id"] != ids[0]));
    let r = h.call("GET", "/v1/sandboxes?limit=0", None).await;
    assert_eq!(r.status, 400);

    // Lifecycle at runtime: validated, applied, audited; reads keep it.
    let path = format!("/v1/sandboxes/{}/lifecycle", ids[0]);
    let v = h
        .ok(
            "PATCH",
            &path,
            Some(json!({"idle_timeout_secs": 600, "on_idle": "pause", "timeout_secs": 3600})),
        )
        .await;
    assert_eq!(v["manifest"]["lifecycle"]["idle_timeout_secs"], 600);
    assert!(
        v["manifest"]["lifecycle"]["max_lifetime_secs"]
            .as_u64()
            .unwrap()
            >= 3600
    );
    for bad in [
        json!({}),
        json!({"paused_ttl_secs": 0}),
        json!({"idle_timeout_secs": "x"}),
        json!({"bogus": 1}),
    ] {
        let r = h.call("PATCH", &path, Some(bad.clone())).await;
        assert_eq!(r.status, 400, "{bad}: {}", r.body);
        assert!(r.body["error"]["code"].is_string());
    }
    let again = h.state(&ids[0]).await;
    assert_eq!(again["manifest"]["lifecycle"]["idle_timeout_secs"], 600);
    let audit = h.ok("GET", "/v1/audit", None).await;
    let n = audit
        .as_array()
        .or_else(|| audit["entries"].as_array())
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "lifecycle.set" && e["target"] == ids[0])
        .count();
    assert_eq!(n, 1, "{audit}");
}
