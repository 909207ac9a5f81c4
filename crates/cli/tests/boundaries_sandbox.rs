//! The manifest as a contract, tried from inside process sandboxes through
//! the real daemon: every test attempts to cross one boundary (read outside
//! the mounts, write a read-only mount, mount what the operator did not
//! allow, egress off the allowlist, fork bomb, memory hog, disk fill, outlive
//! the lifetime) and prints one `denied: <what>` line per refused attempt.
//! Run with `--nocapture` to see them; each test ends with its count.
mod common;
#[path = "../../backend-process/tests/common/netfix.rs"]
mod netfix;

use common::*;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::Duration;

struct Tally(&'static str, u32);

impl Tally {
    fn denied(&mut self, what: &str) {
        self.1 += 1;
        println!("denied: {what}");
    }
}

impl Drop for Tally {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            println!("[{}] {} escape attempts, all denied", self.0, self.1);
        }
    }
}

/// An allowed root with input data, and a host secret next to it.
fn host_files() -> (PathBuf, PathBuf) {
    let base = std::env::temp_dir().join(unique("stasis-bnd-host"));
    let allowed = base.join("allowed");
    std::fs::create_dir_all(allowed.join("data")).unwrap();
    std::fs::write(allowed.join("data/in.txt"), b"input\n").unwrap();
    std::fs::write(base.join("secret.txt"), b"HOST-SECRET\n").unwrap();
    std::os::unix::fs::symlink(base.join("secret.txt"), allowed.join("link-out")).unwrap();
    (base, allowed)
}

async fn exec(h: &Http, id: &str, script: &str) -> Value {
    h.ok(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"argv": ["sh", "-c", script], "timeout_ms": 60000})),
    )
    .await
}

fn stdout(v: &Value) -> String {
    v["stdout"].as_str().unwrap_or("").to_string() + v["stderr"].as_str().unwrap_or("")
}

async fn daemon_allowing(allowed: Option<&Path>) -> Daemon {
    match allowed {
        Some(a) => Daemon::start(&["--allow-mount", a.to_str().unwrap()]).await,
        None => Daemon::start(&[]).await,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mounts_and_outputs_hold() {
    let mut t = Tally("mounts_and_outputs", 0);
    let (base, allowed) = host_files();
    let d = daemon_allowing(Some(&allowed)).await;
    let h = d.http();
    let secret = base.join("secret.txt");

    // Mount sources the operator did not allow.
    for (src, what) in [
        (secret.clone(), "mount source outside the allowed roots"),
        (
            allowed.join("link-out"),
            "mount source symlinked out of an allowed root",
        ),
        (
            allowed.join("../secret.txt"),
            "mount source with .. out of an allowed root",
        ),
        (allowed.join("missing"), "mount source that does not exist"),
    ] {
        let r = h
            .call(
                "POST",
                "/v1/sandboxes",
                Some(json!({"manifest": {"mounts": [{"source": src, "target": "/in"}]}})),
            )
            .await;
        assert_eq!(r.status, 400, "{what}: {}", r.body);
        assert_eq!(r.body["error"]["code"], "invalid_manifest", "{}", r.body);
        assert_eq!(r.body["error"]["field"], "mounts[0].source", "{}", r.body);
        t.denied(what);
    }

    let id = h
        .create(json!({
            "mounts": [{"source": allowed.join("data"), "target": "/input"}],
            "outputs": ["/workspace/out"],
        }))
        .await;
    assert_eq!(h.sh(&id, "cat /input/in.txt").await, "input\n");

    // Reads outside the mounts.
    let s = secret.display();
    for (script, what) in [
        (
            format!("cat /input/../../{s}; cat /input/../secret.txt; cat /input/../../secret.txt"),
            "read outside a mount via ../",
        ),
        (
            format!("cat /proc/1/root{s}; cat /proc/1/root/../../{s}"),
            "read a host file via /proc/1/root",
        ),
        (
            format!("ln -sf {s} /workspace/l && cat /workspace/l"),
            "read a host file via a symlink",
        ),
        (
            "cat /etc/shadow; cat /proc/1/root/etc/shadow".to_string(),
            "read the host's /etc/shadow",
        ),
    ] {
        let v = exec(&h, &id, &format!("{script} 2>&1; true")).await;
        assert!(
            !stdout(&v).contains("HOST-SECRET") && !stdout(&v).contains("root:"),
            "{what}: {v}"
        );
        t.denied(what);
    }
    // The file API on a planted symlink stays inside the sandbox too.
    let r = h
        .call(
            "GET",
            &format!("/v1/sandboxes/{id}/files?path=/workspace/l"),
            None,
        )
        .await;
    assert_ne!(r.status, 200, "{}", r.body);
    t.denied("read a host file through the file API via a symlink");

    // Writes to the read-only mount, and remounting it.
    for (script, what) in [
        (
            "echo x > /input/new.txt",
            "create a file in a read-only mount",
        ),
        (
            "echo x >> /input/in.txt",
            "append to a file in a read-only mount",
        ),
        ("rm -f /input/in.txt", "delete from a read-only mount"),
        (
            "mount -o remount,rw /input && echo x > /input/new.txt",
            "remount the input read-write",
        ),
        (
            "umount /input && echo x > /input/new.txt",
            "unmount the input to write beneath",
        ),
    ] {
        let v = exec(&h, &id, &format!("{{ {script}; }} 2>&1")).await;
        assert_ne!(v["exit_code"], 0, "{what}: {v}");
        t.denied(what);
    }
    assert_eq!(
        std::fs::read(allowed.join("data/in.txt")).unwrap(),
        b"input\n"
    );
    assert!(!allowed.join("data/new.txt").exists());

    // Outputs: a symlink to a host file is collected as a link, not followed.
    h.sh(&id, &format!("echo result > /workspace/out/r.txt && ln -s {s} /workspace/out/s && ln -s /etc/passwd /workspace/out/p")).await;
    let to = d.dir.join("collected");
    let o = d.cli(&["outputs", &id, "--to", to.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::read(to.join("workspace/out/r.txt")).unwrap(),
        b"result\n"
    );
    let l = std::fs::symlink_metadata(to.join("workspace/out/s")).unwrap();
    assert!(l.file_type().is_symlink());
    let raw = d
        .client()
        .get(format!("{}/v1/sandboxes/{id}/outputs", d.url))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&raw);
    assert!(!text.contains("HOST-SECRET") && !text.contains("root:x:0"));
    t.denied("collect a host file through a symlink in an output dir");

    // A paused sandbox's outputs are read without resuming it.
    h.ok(
        "POST",
        &format!("/v1/sandboxes/{id}/pause"),
        Some(json!({})),
    )
    .await;
    let o = d.cli(&[
        "outputs",
        &id,
        "--tar",
        d.dir.join("o.tar").to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(h.state(&id).await["state"], "paused");
    let audit = h.ok("GET", &format!("/v1/audit?target={id}"), None).await;
    assert!(
        audit.to_string().contains("outputs"),
        "download not audited: {audit}"
    );
    drop(d);
    let _ = std::fs::remove_dir_all(&base);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mounts_are_revalidated_on_resume() {
    let mut t = Tally("mount_revalidation", 0);
    let (base, allowed) = host_files();
    let mut d = daemon_allowing(Some(&allowed)).await;
    let h = d.http();
    let id = h
        .create(json!({
            "mounts": [{"source": allowed.join("data"), "target": "/input"}],
            "lifecycle": {"on_idle": "nothing"},
        }))
        .await;
    h.ok(
        "POST",
        &format!("/v1/sandboxes/{id}/pause"),
        Some(json!({"keep_memory": false})),
    )
    .await;
    // The operator withdraws the root; the paused sandbox may not come back with it.
    d.set_extra(&[]);
    d.restart().await;
    let h = d.http();
    let r = h
        .call("POST", &format!("/v1/sandboxes/{id}/resume"), None)
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.body["error"]["field"], "mounts[0].source", "{}", r.body);
    assert_eq!(h.state(&id).await["state"], "paused");
    t.denied("resume with a mount whose root the operator no longer allows");
    let _ = std::fs::remove_dir_all(&base);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn egress_only_to_the_allowlist() {
    let mut t = Tally("egress", 0);
    let fx = netfix::NetFixture::new("cli-egress");
    let d = Daemon::start(
        &fx.daemon_flags()
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    )
    .await;
    let h = d.http();
    let id = h
        .create(json!({"network": {"allow": fx.allow()}, "lifecycle": {"on_idle": "nothing"}}))
        .await;
    let gw: Option<std::net::Ipv4Addr> = h
        .sh(&id, "ip route show default")
        .await
        .split_whitespace()
        .skip_while(|w| *w != "via")
        .nth(1)
        .and_then(|a| a.parse().ok());
    let denied = fx.denied_checks(gw);
    let mut checks = fx.allowed_checks();
    checks.extend(denied.iter().map(|(c, _)| c.clone()));
    let mut argv = vec![
        "/usr/bin/python3".to_string(),
        "-c".into(),
        netfix::PROBE.into(),
    ];
    argv.extend(checks);
    let v = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"argv": argv, "timeout_ms": 60000})),
        )
        .await;
    let res = netfix::probe_results(v["stdout"].as_str().unwrap());
    for c in fx.allowed_checks() {
        assert!(res[&c].0, "{c} should connect: {v}");
    }
    for (c, what) in &denied {
        assert!(!res[c].0, "{what} ({c}) not denied: {}", res[c].1);
        t.denied(what);
    }
    // IPv6 destinations cannot be enforced here: refused at create.
    let r = h
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"manifest": {"network": {"allow": ["[::1]:80"]}}})),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    t.denied("an IPv6 allowlist entry the process backend cannot enforce");
    // Without an allowlist: loopback only.
    let plain = h.create(json!({})).await;
    let v = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{plain}/exec"),
            Some(json!({"argv": [
                "/usr/bin/python3", "-c", netfix::PROBE,
                format!("tcp:127.0.0.1:{}", fx.lo_allowed),
                format!("tcp:{}:{}", fx.ns_ip, fx.ns_tcp_allowed),
            ], "timeout_ms": 60000})),
        )
        .await;
    let o = stdout(&v);
    assert_eq!(o.matches(" fail").count(), 2, "{o}");
    t.denied("egress from a sandbox without an allowlist (host loopback)");
    t.denied("egress from a sandbox without an allowlist (other address)");
    // Destroy removes the sandbox's table.
    h.ok("DELETE", &format!("/v1/sandboxes/{id}"), None).await;
    let tables = std::process::Command::new("nft")
        .args(["list", "tables"])
        .output()
        .unwrap();
    assert!(!String::from_utf8_lossy(&tables.stdout).contains(&id.replace('-', "_")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_caps_hold() {
    let mut t = Tally("caps", 0);
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let id = h
        .create(json!({
            "resources": {"pids": 64, "memory_mb": 64, "disk_mb": 32},
            "lifecycle": {"on_idle": "nothing"},
        }))
        .await;

    // Fork bomb: forks stop at the pids cap; the parent cleans up after itself.
    let bomb = "import os, signal\nkids = []\ntry:\n    while True:\n        p = os.fork()\n        if p == 0:\n            signal.pause(); os._exit(0)\n        kids.append(p)\nexcept OSError as e:\n    print('stopped', len(kids), e.errno)\nfor k in kids: os.kill(k, 9)\nfor k in kids: os.waitpid(k, 0)\n";
    let v = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"argv": ["/usr/bin/python3", "-c", bomb], "timeout_ms": 60000})),
        )
        .await;
    let o = stdout(&v);
    let n: u32 = o
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{o}"));
    assert!(o.starts_with("stopped") && n < 64, "{o}");
    t.denied("fork bomb past resources.pids");

    // Memory hog: killed at the memory cap.
    let v = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"argv": ["/usr/bin/python3", "-c", "b = bytearray(512 << 20)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('allocated')"], "timeout_ms": 60000})),
        )
        .await;
    assert!(!stdout(&v).contains("allocated"), "{v}");
    assert_ne!(v["exit_code"], 0, "{v}");
    t.denied("memory hog past resources.memory_mb");

    // Disk fill: ENOSPC inside; the daemon serves and the host is untouched.
    let v = exec(
        &h,
        &id,
        "dd if=/dev/zero of=/workspace/fill bs=1M count=256 2>&1; echo rc=$?",
    )
    .await;
    let o = stdout(&v);
    assert!(
        o.contains("No space left on device") && !o.contains("rc=0"),
        "{o}"
    );
    let img = d.dir.join("sandboxes").join(&id).join("layer.img");
    use std::os::unix::fs::MetadataExt;
    let used = std::fs::metadata(&img).unwrap().blocks() * 512;
    assert!(
        used <= 33 << 20,
        "host holds {used} bytes for a 32 MiB quota"
    );
    let hz = d
        .client()
        .get(format!("{}/healthz", d.url))
        .send()
        .await
        .unwrap();
    assert!(hz.status().is_success());
    assert_eq!(h.sh(&id, "rm /workspace/fill && echo ok").await, "ok\n");
    t.denied("disk fill past resources.disk_mb");

    // Lifetime: a sandbox does not outlive max_lifetime_secs of running time.
    let short = h
        .create(json!({"lifecycle": {"on_idle": "nothing", "max_lifetime_secs": 2}}))
        .await;
    h.wait_state(&short, "destroyed", Duration::from_secs(120))
        .await;
    let r = h
        .call(
            "POST",
            &format!("/v1/sandboxes/{short}/exec"),
            Some(json!({"argv": ["true"]})),
        )
        .await;
    assert_ne!(r.status, 200, "{}", r.body);
    t.denied("running past lifecycle.max_lifetime_secs");
}

async fn probe(
    h: &Http,
    id: &str,
    checks: &[String],
) -> std::collections::BTreeMap<String, (bool, String)> {
    let mut argv = vec![
        "/usr/bin/python3".to_string(),
        "-c".into(),
        netfix::PROBE.into(),
    ];
    argv.extend(checks.iter().cloned());
    let v = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"argv": argv, "timeout_ms": 60000})),
        )
        .await;
    netfix::probe_results(v["stdout"].as_str().unwrap_or(""))
}

/// The allowlist holds for forks (new veth and table) and after a daemon
/// killed with SIGKILL comes back (the sandbox is rebuilt with its rules).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn egress_rules_follow_forks_and_restarts() {
    let mut t = Tally("egress_lifecycle", 0);
    let fx = netfix::NetFixture::new("cli-egress-life");
    let mut d = Daemon::start(
        &fx.daemon_flags()
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    )
    .await;
    let h = d.http();
    let id = h
        .create(json!({"network": {"allow": fx.allow()}, "lifecycle": {"on_idle": "nothing"}, "resources": {"disk_mb": 64}}))
        .await;
    h.sh(&id, "echo kept > /workspace/f").await;
    let denied = format!("tcp:127.0.0.1:{}", fx.lo_denied);
    let mut checks = fx.allowed_checks();
    checks.push(denied.clone());
    let kid = h.fork(&id, 1).await.remove(0);
    for (sb, what) in [(&id, "origin"), (&kid, "fork")] {
        let r = probe(&h, sb, &checks).await;
        for c in fx.allowed_checks() {
            assert!(r[&c].0, "{what}: {c}: {}", r[&c].1);
        }
        assert!(!r[&denied].0, "{what}: {}", r[&denied].1);
        t.denied(&format!(
            "egress to a non-allowlisted loopback port from the {what}"
        ));
    }
    d.restart().await;
    let h = d.http();
    // The next request resumes the sandbox: files back, rules back.
    assert_eq!(h.sh(&id, "cat /workspace/f").await, "kept\n");
    let r = probe(&h, &id, &checks).await;
    for c in fx.allowed_checks() {
        assert!(r[&c].0, "after restart: {c}: {}", r[&c].1);
    }
    assert!(!r[&denied].0, "after restart: {}", r[&denied].1);
    t.denied("egress to a non-allowlisted loopback port after a daemon restart");
    for sb in [&id, &kid] {
        h.ok("DELETE", &format!("/v1/sandboxes/{sb}"), None).await;
    }
}

/// What a daemon holds on the host for sandboxes: entries of its sandboxes
/// dir, mounts under its data dir, cgroups under its parent. Each must
/// belong to a sandbox in `live`.
fn assert_host_state_only_of(d: &Daemon, live: &[String]) {
    let dir = d.dir.join("sandboxes");
    for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        assert!(live.contains(&name), "leftover sandbox dir {name}");
    }
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    for m in info.lines().filter_map(|l| l.split(' ').nth(4)) {
        if let Ok(rest) = Path::new(m).strip_prefix(&dir) {
            let id = rest.iter().next().unwrap().to_string_lossy().to_string();
            assert!(live.contains(&id), "leftover mount {m}");
        }
    }
    // Sandbox cgroups (named by id), directly under the parent or under the
    // daemon's own groups there (e.g. `.supervisors`).
    for root in cgroup_roots() {
        let mut dirs = vec![root.join(&d.cgroup_parent)];
        while let Some(dir) = dirs.pop() {
            for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                if !e.path().is_dir() {
                    continue;
                }
                let name = e.file_name().to_string_lossy().to_string();
                if name.starts_with('.') {
                    dirs.push(e.path());
                } else if name.starts_with("sb-") {
                    assert!(
                        live.iter().any(|id| name.contains(id.as_str())),
                        "leftover cgroup {}",
                        e.path().display()
                    );
                }
            }
        }
    }
}

async fn sandbox_ids(h: &Http) -> Vec<String> {
    h.ok("GET", "/v1/sandboxes", None)
        .await
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap().to_string())
        .collect()
}

async fn refusals(h: &Http, target: &str, op: &str) -> usize {
    h.ok("GET", &format!("/v1/audit?target={target}"), None)
        .await
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "refused" && e["detail"]["op"] == op)
        .count()
}

/// A tenant can never make a host directory its root: every host path as
/// `image` (the examples from the report, the daemon's data dir with its
/// admin token, traversal) is refused at create and at restore, through the
/// API and the CLI; a record that already carries one (written before the
/// check existed) is refused at resume, stays paused and is never run. Every
/// refusal is audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_never_names_a_host_path() {
    let mut t = Tally("image", 0);
    let mut d = Daemon::start(&[]).await;
    let h = d.http();
    let id = h.create(json!({"lifecycle": {"on_idle": "nothing"}})).await;
    h.sh(&id, "echo mine > /workspace/f").await;
    let snap = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/snapshots"),
            Some(json!({})),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let data_dir = d.dir.display().to_string();
    let hostile = [
        "/usr/..".to_string(),
        "/etc/..".into(),
        "/var/../".into(),
        "/".into(),
        "/tmp".into(),
        data_dir.clone(),
        format!("{data_dir}/.."),
        "..".into(),
        "../../..".into(),
        "default/../../..".into(),
        "./".into(),
    ];
    for image in &hostile {
        for (route, body) in [
            (
                "/v1/sandboxes".to_string(),
                json!({"manifest": {"image": image}}),
            ),
            (
                format!("/v1/snapshots/{snap}/restore"),
                json!({"manifest": {"image": image}}),
            ),
        ] {
            let r = h.call("POST", &route, Some(body)).await;
            assert_eq!(r.status, 400, "{image} {route}: {}", r.body);
            assert_eq!(r.body["error"]["code"], "invalid_manifest", "{}", r.body);
            assert_eq!(r.body["error"]["field"], "image", "{}", r.body);
        }
        t.denied(&format!("image {image:?} at create and restore"));
    }
    let out = d.cli(&["create", "--image", "/etc/.."]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("invalid_manifest") && err.contains("image"),
        "{err}"
    );
    t.denied("image host path through the CLI");
    // Type errors reach the CLI as one readable line naming the field.
    let mf = d.dir.join("bad-manifest.json");
    for (m, field) in [
        (
            json!({"resources": {"memory_mb": -256}}),
            "resources.memory_mb",
        ),
        (
            json!({"lifecycle": {"on_idle": "bogus"}}),
            "lifecycle.on_idle",
        ),
        (json!({"resources": [512]}), "resources"),
        (json!([]), "manifest"),
    ] {
        std::fs::write(&mf, m.to_string()).unwrap();
        let out = d.cli(&["create", "--manifest", mf.to_str().unwrap()]);
        assert!(!out.status.success(), "{m}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{m}: {err}");
        assert!(err.contains(&format!("{field}: ")), "{m}: {err}");
        assert!(!err.contains("expected u64"), "{m}: {err}");
    }
    let _ = std::fs::remove_file(&mf);
    // A name nobody registered: refused by the backend, nothing left behind.
    let r = h
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"manifest": {"image": "nosuch"}})),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.body["error"]["field"], "image", "{}", r.body);
    t.denied("an image name the operator did not register");
    assert_eq!(sandbox_ids(&h).await, vec![id.clone()]);
    assert_host_state_only_of(&d, std::slice::from_ref(&id));
    assert_eq!(refusals(&h, "sandboxes", "create").await, hostile.len() + 2);
    assert_eq!(refusals(&h, &snap, "restore").await, hostile.len());

    // A record from before the check, carrying a host path.
    h.ok(
        "POST",
        &format!("/v1/sandboxes/{id}/pause"),
        Some(json!({"keep_memory": false})),
    )
    .await;
    d.kill9();
    let sql = format!(
        "UPDATE sandboxes SET manifest = json_set(manifest, '$.image', '/etc/..') WHERE id = '{id}';"
    );
    let st = std::process::Command::new("sqlite3")
        .arg(d.dir.join("meta.db"))
        .arg(&sql)
        .status()
        .expect("sqlite3");
    assert!(st.success());
    d.restart().await;
    let h = d.http();
    assert_eq!(h.state(&id).await["manifest"]["image"], "/etc/..");
    for (m, p, body) in [
        ("POST", format!("/v1/sandboxes/{id}/resume"), None),
        (
            "POST",
            format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"argv": ["cat", "/etc/shadow"]})),
        ),
        (
            "GET",
            format!("/v1/sandboxes/{id}/files?path=/etc/shadow"),
            None,
        ),
        (
            "POST",
            format!("/v1/sandboxes/{id}/fork"),
            Some(json!({"count": 1})),
        ),
    ] {
        let r = h.call(m, &p, body).await;
        assert_eq!(r.status, 400, "{m} {p}: {}", r.body);
        assert_eq!(r.body["error"]["field"], "image", "{}", r.body);
        t.denied(&format!("{m} {p} of a record with a host path image"));
    }
    assert_eq!(h.state(&id).await["state"], "paused");
    assert_eq!(refusals(&h, &id, "resume").await, 4);
    assert_eq!(sandbox_ids(&h).await, vec![id.clone()]);
    h.ok("DELETE", &format!("/v1/sandboxes/{id}"), None).await;
}

/// A refused create or restore answers its error and leaves no record, no
/// directory, no mount and no cgroup, also when it fails after the backend
/// started setting the sandbox up (quota filesystem mounted, cgroups made)
/// and when the snapshot fails verification; the refusal is audited. A
/// daemon killed mid-create still settles the record (reconcile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_starts_leave_nothing() {
    let mut t = Tally("refused_starts", 0);
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let id = h
        .create(json!({"lifecycle": {"on_idle": "nothing"}, "resources": {"disk_mb": 16}}))
        .await;
    h.sh(&id, "head -c 300000 /dev/urandom > /workspace/data")
        .await;
    // Fails inside the backend, after its quota filesystem and cgroups exist:
    // the working directory cannot be made under a file.
    let r = h
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"manifest": {"workdir": "/etc/passwd/w", "resources": {"disk_mb": 16}}})),
        )
        .await;
    assert!(r.status >= 400, "{}", r.body);
    t.denied("a create that fails in the backend");
    // The microVM backend refuses an image nobody registered (or is not
    // available here): no record either way.
    let r = h
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"manifest": {"backend": "microvm", "image": "nosuch"}})),
        )
        .await;
    assert!((400..500).contains(&r.status), "{}", r.body);
    t.denied("a microVM create with an unregistered image");
    assert_eq!(sandbox_ids(&h).await, vec![id.clone()]);
    assert_host_state_only_of(&d, std::slice::from_ref(&id));

    let snap = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/snapshots"),
            Some(json!({})),
        )
        .await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut chunks: Vec<PathBuf> = files_under(&d.dir.join("store"))
        .into_iter()
        .filter(|p| p.to_string_lossy().contains("/chunks/"))
        .collect();
    chunks.sort_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0));
    let chunk = chunks.pop().expect("a chunk");
    let mut data = std::fs::read(&chunk).unwrap();
    let mid = data.len() / 2;
    data[mid] ^= 0x01;
    std::fs::write(&chunk, &data).unwrap();
    let r = h
        .call("POST", &format!("/v1/snapshots/{snap}/restore"), None)
        .await;
    assert_eq!(r.status, 422, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "integrity_error", "{}", r.body);
    t.denied("a restore of a snapshot with a corrupt chunk");
    // The fork's fresh snapshot shares (deduplicates) the corrupt chunk:
    // its restore fails and the fork is rolled back as a whole.
    let r = h
        .call(
            "POST",
            &format!("/v1/sandboxes/{id}/fork"),
            Some(json!({"count": 2})),
        )
        .await;
    assert_eq!(r.status, 422, "{}", r.body);
    t.denied("a fork whose fresh snapshot cannot be restored");
    assert_eq!(sandbox_ids(&h).await, vec![id.clone()]);
    assert_host_state_only_of(&d, std::slice::from_ref(&id));
    assert!(refusals(&h, "sandboxes", "create").await >= 1);
    assert_eq!(refusals(&h, &snap, "restore").await, 1);
    h.ok("DELETE", &format!("/v1/sandboxes/{id}"), None).await;
}
