//! The manifest's boundaries on a microVM sandbox, through the real daemon.
//! Needs the guest image (STASIS_IMAGE_DIR, set by scripts/test.sh); without
//! it the test says it did not run.
//!
//! One sandbox is reused for every attempt (TCG boots cost seconds): egress
//! to an allowlisted host loopback port works while every other destination
//! fails, before and after a pause/resume (the QEMU is replaced by one
//! loaded from the migration), and so does the read-only input mount (a
//! source outside `--allow-mount` is refused); outputs of a paused sandbox
//! come from the output directory only; a disk fill ends in ENOSPC and the VM and
//! daemon carry on; a fork bomb stops at the pids cap. Host listeners count
//! what reaches them, so a denial is seen on the host side too. Each denied
//! attempt prints `denied: <what>`, and the total is printed at the end.
//!
//! A second test follows a secret on this backend: delivered to the exec
//! that asks for it, and absent from everything stored except memory images.

mod common;

use common::Daemon;
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

fn image_available() -> bool {
    match std::env::var_os("STASIS_IMAGE_DIR") {
        Some(_) => true,
        None => {
            eprintln!("microVM boundary test NOT RUN: STASIS_IMAGE_DIR is not set (scripts/test.sh sets it)");
            false
        }
    }
}

/// A loopback listener answering each line with `pong-<name>`, counting
/// the connections it accepted.
fn listener(name: &'static str) -> (u16, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let n = Arc::new(AtomicUsize::new(0));
    let n2 = n.clone();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            n2.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut line = String::new();
                if BufReader::new(c.try_clone().unwrap())
                    .read_line(&mut line)
                    .is_ok()
                {
                    let mut c = c;
                    let _ = c.write_all(format!("pong-{name}\n").as_bytes());
                }
            });
        }
    });
    (port, n)
}

const PROBE: &str = r#"
import socket, sys
for dest in sys.argv[1:]:
    host, port = dest.rsplit(":", 1)
    s = socket.socket(socket.AF_INET)
    s.settimeout(4)
    try:
        s.connect((host, int(port)))
        s.sendall(b"ping\n")
        d = s.recv(100)
        print(dest, "OK " + d.decode().strip() if d else "FAIL closed without reply")
    except Exception as e:
        print(dest, "FAIL", type(e).__name__, e)
    s.close()
"#;

async fn exec_sh(h: &common::Http, id: &str, script: &str) -> serde_json::Value {
    h.ok(
        "POST",
        &format!("/v1/sandboxes/{id}/exec"),
        Some(json!({"argv": ["sh", "-c", script], "timeout_ms": 120000})),
    )
    .await
}

#[tokio::test]
async fn microvm_sandbox_boundaries_hold_through_the_daemon() {
    if !image_available() {
        return;
    }
    let inputs = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(inputs.path().join("data")).unwrap();
    std::fs::write(inputs.path().join("data/hello.txt"), "input\n").unwrap();
    let outside = tempfile::tempdir().unwrap();
    let root = inputs.path().display().to_string();
    let (allowed, allowed_n) = listener("allowed");
    let (other, other_n) = listener("other");
    // Egress reaches the host's loopback only where the operator opens it.
    let exposed = format!("127.0.0.1:{allowed}");
    let d = Daemon::start(&["--allow-mount", &root, "--egress-expose", &exposed]).await;
    let h = d.http();
    let mut denied = 0usize;

    // A bad allowlist entry is refused with its field named.
    let r = h
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"manifest": {"backend": "microvm", "network": {"allow": ["*.com"]}}})),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.body["error"]["field"], "network.allow[0]", "{}", r.body);
    println!(
        "denied: allowlist wildcard wider than one label ({})",
        r.body["error"]["message"]
    );
    denied += 1;

    // A mount source outside the operator's allowed roots is refused.
    let r = h
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"manifest": {"backend": "microvm",
                "mounts": [{"source": outside.path().display().to_string(), "target": "/in"}]}})),
        )
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert_eq!(r.body["error"]["field"], "mounts[0].source", "{}", r.body);
    println!("denied: mount source outside --allow-mount");
    denied += 1;

    let id = h
        .create(json!({
            "mounts": [{"source": format!("{root}/data"), "target": "/in"}],
            "backend": "microvm",
            "lifecycle": {"on_idle": "nothing"},
            "network": {"allow": [format!("127.0.0.1:{allowed}")]},
            "outputs": ["/out"],
            "resources": {"disk_mb": 32, "pids": 64},
        }))
        .await;
    h.sh(&id, &format!("cat > /tmp/probe.py <<'EOF'\n{PROBE}\nEOF"))
        .await;
    assert_eq!(h.sh(&id, "test -d /out && echo yes").await, "yes\n");
    assert_eq!(h.sh(&id, "cat /in/hello.txt").await, "input\n");

    for when in ["fresh", "after pause/resume"] {
        if when != "fresh" {
            let p = h
                .ok(
                    "POST",
                    &format!("/v1/sandboxes/{id}/pause"),
                    Some(json!({})),
                )
                .await;
            assert_eq!(p["pause_kind"], "memory", "{p}");
            // The next exec resumes it.
        }
        // The read-only mount stays read-only (also after the resume, when
        // its disk was attached to a new QEMU).
        for (what, cmd) in [
            ("write into the read-only mount", "echo x > /in/new"),
            ("remount the read-only mount rw", "mount -o remount,rw /in"),
        ] {
            let v = exec_sh(&h, &id, cmd).await;
            assert_ne!(v["exit_code"], 0, "{when}: {what}: {v}");
            println!("denied: {when}: {what}");
            denied += 1;
        }
        assert_eq!(h.sh(&id, "cat /in/hello.txt").await, "input\n");
        let (a0, o0) = (
            allowed_n.load(Ordering::SeqCst),
            other_n.load(Ordering::SeqCst),
        );
        // The host's loopback port is reached as listed, also through
        // slirp's host alias (the same path, by design); nothing else is.
        let dests = [
            format!("127.0.0.1:{allowed}"),
            format!("10.0.2.2:{allowed}"),
            format!("10.0.2.2:{other}"),
            format!("127.0.0.1:{other}"),
            format!("10.0.2.100:{other}"),
        ];
        let out = h
            .sh(&id, &format!("python3 /tmp/probe.py {}", dests.join(" ")))
            .await;
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), dests.len(), "{out}");
        for (i, l) in lines[..2].iter().enumerate() {
            assert_eq!(*l, format!("{} OK pong-allowed", dests[i]), "{when}: {out}");
        }
        for l in &lines[2..] {
            assert!(l.contains(" FAIL "), "{when}: must be denied: {l}");
            println!("denied: {when}: egress to {l}");
            denied += 1;
        }
        assert_eq!(
            other_n.load(Ordering::SeqCst),
            o0,
            "{when}: other listener reached"
        );
        assert_eq!(allowed_n.load(Ordering::SeqCst), a0 + 2, "{when}");
    }

    // Outputs of a paused microVM: collected (the sandbox is resumed for
    // it) from the output directory only; a symlink stays a link, a fifo
    // is left out.
    h.sh(
        &id,
        "echo result > /out/r.txt && ln -s /etc/shadow /out/link && mkfifo /out/fifo",
    )
    .await;
    let p = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/pause"),
            Some(json!({})),
        )
        .await;
    assert_eq!(p["state"], "paused", "{p}");
    let (status, body) = h
        .bytes("GET", &format!("/v1/sandboxes/{id}/outputs"), Vec::new())
        .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let mut names = Vec::new();
    for e in tar::Archive::new(&body[..]).entries().unwrap() {
        let mut e = e.unwrap();
        let n = e.path().unwrap().display().to_string();
        if n == "out/r.txt" {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut e, &mut s).unwrap();
            assert_eq!(s, "result\n");
        }
        if n == "out/link" {
            assert!(e.header().entry_type().is_symlink());
        }
        names.push(n);
    }
    names.sort();
    assert_eq!(names, ["out/", "out/link", "out/r.txt"], "outputs");
    println!("denied: collecting a fifo and following a symlink out of the output dir");
    denied += 1;

    // Disk fill: ENOSPC in the guest; the sandbox and the daemon carry on.
    let v = exec_sh(
        &h,
        &id,
        "dd if=/dev/urandom of=/workspace/fill bs=1M count=1024 2>&1; sync",
    )
    .await;
    let out = v["stdout"].as_str().unwrap_or_default();
    assert!(out.contains("No space left on device"), "disk fill: {v}");
    println!("denied: writing past disk_mb=32 (ENOSPC)");
    denied += 1;
    assert_eq!(h.sh(&id, "rm /workspace/fill; echo alive").await, "alive\n");
    h.ok("GET", "/healthz", None).await;

    // Fork bomb: stopped at the pids cap; the sandbox answers afterwards.
    let _ = exec_sh(&h, &id, "timeout 6 sh -c 'f() { f | f & }; f; sleep 5'").await;
    // Read through the files API, not a shell: what is left of the bomb
    // may still hold every pid of the cap, and a shell could not fork.
    let r = h
        .raw(
            "GET",
            &format!("/v1/sandboxes/{id}/files?path=/sys/fs/cgroup/stasis/pids.events"),
            Vec::new(),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let ev = r.body.as_str().unwrap_or_default().to_string();
    let hits: u64 = ev
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(hits > 0, "pids cap never reached: {ev}");
    println!("denied: fork bomb past pids=64 ({hits} forks refused)");
    denied += 1;
    // What is left of the bomb is killed through its cgroup.
    let r = h
        .raw(
            "PUT",
            &format!("/v1/sandboxes/{id}/files?path=/sys/fs/cgroup/stasis/cgroup.kill"),
            b"1".to_vec(),
        )
        .await;
    assert_eq!(r.status, 204, "{}", r.body);
    assert_eq!(h.sh(&id, "echo alive").await, "alive\n");

    h.ok("DELETE", &format!("/v1/sandboxes/{id}"), None).await;
    println!("microvm boundary attempts denied: {denied} (all)");
}

/// Whether a file is a memory image (RAM or device state) of a microVM.
fn is_memory_image(p: &std::path::Path) -> bool {
    p.file_name().is_some_and(|n| {
        n == stasis_backend_microvm::MEMORY_RAM || n == stasis_backend_microvm::MEMORY_STATE
    })
}

/// A secret on the microVM path: the exec that asks gets it; the guest's
/// disk, the metadata, the logs and every stored artifact other than a
/// memory image hold zero copies, on the data dir and in every snapshot
/// decrypted through the store. A memory image may hold it (a process had
/// it in RAM; the README says so): how many do is counted and printed.
#[tokio::test]
async fn microvm_secret_reaches_the_exec_and_no_disk_artifact() {
    if !image_available() {
        return;
    }
    let mut d = Daemon::start(&[]).await;
    let h = d.http();
    let admin = d.http_as(Some(&d.admin_token()));
    let secret = format!("s3cr3t-vm-{}-{}", std::process::id(), common::unique("v"));
    let hex: String = secret.bytes().map(|b| format!("{b:02x}")).collect();
    admin
        .ok(
            "PUT",
            "/v1/admin/tenants/t-default/secrets/API_KEY",
            Some(json!({"value": secret})),
        )
        .await;
    let id = h
        .create(json!({"backend": "microvm", "secrets": ["API_KEY"],
                       "lifecycle": {"on_idle": "nothing"}}))
        .await;
    // Shown only as hex, so the output is not the secret.
    let out = h
        .sh(
            &id,
            "printf %s \"$API_KEY\" | od -An -tx1 | tr -d ' \\n'; echo",
        )
        .await;
    assert_eq!(out, format!("{hex}\n"));
    // Without asking, a command sees nothing of it in the guest's files.
    let grep = h
        .sh(
            &id,
            &format!("grep -rlsF '{secret}' /etc /root /tmp /var /workspace; echo done"),
        )
        .await;
    assert_eq!(grep, "done\n", "the secret is in a guest file");
    h.sh(&id, "echo have-key > /workspace/used; sync").await;
    let snap = h
        .ok(
            "POST",
            &format!("/v1/sandboxes/{id}/snapshots"),
            Some(json!({})),
        )
        .await;
    assert!(snap["id"].is_string(), "{snap}");
    h.ok(
        "POST",
        &format!("/v1/sandboxes/{id}/pause"),
        Some(json!({})),
    )
    .await;
    d.kill9();

    let needle = secret.as_bytes();
    let (mut memory_hits, mut memory_images) = (0usize, 0usize);
    let mut count_memory = |dir: &std::path::Path, hits: &[std::path::PathBuf]| {
        memory_images += common::files_under(dir)
            .iter()
            .filter(|p| is_memory_image(p))
            .count();
        for p in hits.iter().filter(|p| is_memory_image(p)) {
            memory_hits += 1;
            println!("memory image holding the secret: {}", p.display());
        }
    };
    // 1. The data dir, raw: metadata DB and WAL, store objects, the
    //    sandbox's disk overlay, console and QEMU logs.
    let hits = common::files_containing(&d.dir, needle);
    let outside: Vec<_> = hits.iter().filter(|p| !is_memory_image(p)).collect();
    assert!(outside.is_empty(), "secret found in {outside:?}");
    count_memory(&d.dir, &hits);
    // 2. Every snapshot, decrypted through the store.
    let snaps = common::decrypted_snapshots(&d.dir).await;
    assert!(snaps.len() >= 2, "expected the user and the pause snapshot");
    for (rec, out) in &snaps {
        assert!(
            !common::contains(rec.as_bytes(), needle),
            "secret in a record"
        );
        let hits = common::files_containing(out.path(), needle);
        let outside: Vec<_> = hits.iter().filter(|p| !is_memory_image(p)).collect();
        assert!(outside.is_empty(), "secret in snapshot files {outside:?}");
        // The scan saw real data: the guest's disk with /workspace/used.
        assert!(
            !common::files_containing(out.path(), b"have-key").is_empty(),
            "snapshot {rec} lacks /workspace/used"
        );
        count_memory(out.path(), &hits);
    }
    println!(
        "microvm secret scan: data dir + {} decrypted snapshots: zero hits outside memory images; \
         memory images holding the secret: {memory_hits} of {memory_images}",
        snaps.len()
    );
}
