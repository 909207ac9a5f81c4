//! A microVM's network and exposed ports, on real guests (`STASIS_IMAGE_DIR`
//! must name a guest image; without it the tests print that they did not
//! run and pass).
//!
//! * With an egress service (a test one, `support/test_egress.rs`): the
//!   guest boots with its NIC, the service is attached to QEMU's own
//!   namespace before the guest runs and detached when QEMU goes, an allow
//!   entry on the host's loopback is reached through the guest relay and
//!   slirp, nothing else is; a python `http.server` in the guest is reached
//!   by `connect_port`, also after a new backend recovered the running
//!   sandbox (attached again) and after pause/resume (the forward comes
//!   back with the new QEMU); a closed port and a loopback-only server are
//!   `port_unreachable` and the guest is unharmed.
//! * Without one: nothing leaves (fail closed), ports still work; a
//!   snapshot of a guest without a NIC (format 2, as saved before every
//!   guest had one) still restores, without network and without ports.
//!
//! Figures (cold create, resume, connect_port) print with `--nocapture`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use stasis_backend::{Backend, Egress, SandboxSpec};
use stasis_backend_microvm::{AccelChoice, MicrovmBackend, MicrovmConfig};
use stasis_core::{ErrorCode, ExecRequest, ExecResult, Manifest, SandboxId, SessionSpec};

#[path = "support/watchdog.rs"]
mod watchdog;

#[path = "support/vm_util.rs"]
mod vm_util;
use vm_util::Reaper;

#[path = "support/test_egress.rs"]
mod test_egress;
use test_egress::{ns_inode, Event, TestEgress};

fn image_dir() -> Option<PathBuf> {
    match std::env::var_os("STASIS_IMAGE_DIR") {
        Some(d) if !d.is_empty() => Some(PathBuf::from(d)),
        _ => {
            let msg =
                b"stasis-backend-microvm: STASIS_IMAGE_DIR not set: microVM net tests NOT RUN\n";
            unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
            None
        }
    }
}

fn backend(img: &Path, egress: Option<Arc<dyn Egress>>, no_nic: bool) -> MicrovmBackend {
    let mut c = MicrovmConfig::new(img.parent().unwrap());
    c.accel = AccelChoice::Tcg;
    c.boot_timeout = Duration::from_secs(120);
    c.agent_timeout = Duration::from_secs(60);
    c.egress = egress;
    c.test_guests_without_nic = no_nic;
    MicrovmBackend::new(c)
}

fn spec(sbs: &Path, img: &Path, allow: Vec<String>, reaper: &Reaper) -> SandboxSpec {
    let id = SandboxId::generate();
    let dir = sbs.join(id.as_str());
    std::fs::create_dir_all(&dir).unwrap();
    let mut manifest = Manifest {
        image: Some(img.display().to_string()),
        ..Default::default()
    };
    manifest.network.allow = allow;
    reaper.0.lock().unwrap().push(id.clone());
    SandboxSpec { id, manifest, dir }
}

async fn run(b: &MicrovmBackend, id: &SandboxId, cmd: &str) -> ExecResult {
    b.exec(
        id,
        ExecRequest {
            argv: vec!["sh".into(), "-c".into(), cmd.into()],
            env: Default::default(),
            cwd: Some("/".into()),
            timeout_ms: 30_000,
            stdin: None,
            user: None,
        },
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("exec {cmd:?}: {e}"))
}

async fn sh(b: &MicrovmBackend, id: &SandboxId, cmd: &str) -> String {
    let r = run(b, id, cmd).await;
    assert_eq!(
        r.exit_code,
        Some(0),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    String::from_utf8_lossy(&r.stdout).into_owned()
}

/// Connect from the guest to `host:port`, send a line, print the answer
/// ("OK <line>") or the failure ("ERR <kind>").
async fn probe(b: &MicrovmBackend, id: &SandboxId, host: &str, port: u16) -> String {
    let py = format!(
        "import socket\ntry:\n s=socket.create_connection(('{host}',{port}),timeout=4)\n s.sendall(b'ping\\n')\n d=s.recv(100).decode().strip()\n print('OK',d) if d else print('ERR closed')\nexcept Exception as e:\n print('ERR',type(e).__name__)\n"
    );
    sh(b, id, &format!("python3 -c \"{py}\""))
        .await
        .trim()
        .to_string()
}

/// A host loopback listener that answers each line with `pong-<name>`.
struct Listener {
    port: u16,
    accepted: Arc<AtomicUsize>,
}

fn listener(name: &'static str) -> Listener {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let n = accepted.clone();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            n.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut r = BufReader::new(c.try_clone().unwrap());
                let mut line = String::new();
                if r.read_line(&mut line).is_ok() {
                    let _ = (&c).write_all(format!("pong-{name}\n").as_bytes());
                }
            });
        }
    });
    Listener { port, accepted }
}

/// Start `argv` as a session in the guest and wait until its port listens.
async fn serve(b: &MicrovmBackend, id: &SandboxId, argv: &[&str], port: u16) {
    b.session_start(
        id,
        // (Through JSON: fields added to the spec keep their defaults.)
        serde_json::from_value::<SessionSpec>(serde_json::json!({"argv": argv, "cwd": "/tmp"}))
            .unwrap(),
    )
    .await
    .unwrap();
    let hex = format!(":{port:04X} ");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let t = sh(b, id, "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null; true").await;
        if t.lines().any(|l| l.contains(&hex) && l.contains(" 0A ")) {
            return;
        }
        assert!(Instant::now() < deadline, "{argv:?} never listened");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// GET / through `connect_port`: the status line.
async fn http_get(b: &MicrovmBackend, id: &SandboxId, port: u16) -> String {
    let s = b.connect_port(id, port).await.unwrap();
    let mut s = s.into_std().unwrap();
    s.set_nonblocking(false).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.write_all(b"GET / HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out.lines().next().unwrap_or_default().to_string()
}

fn console_len(s: &SandboxSpec) -> u64 {
    std::fs::metadata(s.dir.join("console.log"))
        .map(|m| m.len())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn microvm_egress_attach_and_ports() {
    let Some(img) = image_dir() else { return };
    let w = watchdog::watch("microvm_egress_attach_and_ports");
    let reaper = Reaper::new();
    let root = tempfile::Builder::new()
        .prefix("stasis-mvm-net")
        .tempdir_in("/var/tmp")
        .unwrap();
    let sbs = root.path().join("sb");
    let egress = TestEgress::new(sbs.clone());
    let b = backend(&img, Some(egress.clone()), false);
    let allowed = listener("allowed");
    let other = listener("other");
    let s = spec(
        &sbs,
        &img,
        vec![format!("127.0.0.1:{}", allowed.port)],
        &reaper,
    );

    w.step("create");
    let t = Instant::now();
    b.create(&s).await.unwrap();
    let cold_ms = t.elapsed().as_millis();
    let cold_net_ms = b.timings(&s.id).net_ms;
    // One attach, to QEMU's own namespace (not the host's), made while
    // the guest had not yet run (its console was still empty, and is not
    // any more).
    let ev = egress.events_of(&s.id);
    let pid = b.qemu_pid(&s.id).unwrap();
    let qemu_ns = ns_inode(&format!("/proc/{pid}/ns/net"));
    assert_eq!(ev, vec![Event::Attach(s.id.clone(), qemu_ns, 0)]);
    assert_ne!(qemu_ns, ns_inode("/proc/self/ns/net"));
    assert!(console_len(&s) > 0, "the guest has run since");

    w.step("guest network");
    let resolv = sh(&b, &s.id, "cat /etc/resolv.conf").await;
    assert_eq!(resolv.trim(), "nameserver 10.0.2.2");
    let routes = sh(&b, &s.id, "cat /proc/net/route").await;
    assert!(
        routes
            .lines()
            .any(|l| l.split_whitespace().take(3).collect::<Vec<_>>()[1..]
                == ["00000000", "0202000A"]),
        "no default route via 10.0.2.2: {routes}"
    );
    // The host's loopback port of the allowlist, through the guest relay,
    // slirp's 10.0.2.2 and the service's listener in QEMU's namespace.
    assert_eq!(
        probe(&b, &s.id, "127.0.0.1", allowed.port).await,
        "OK pong-allowed"
    );
    assert_eq!(allowed.accepted.load(Ordering::SeqCst), 1);
    // Anything else: the guest's own loopback has nothing there, QEMU's
    // namespace routes nowhere.
    for (host, port) in [
        ("127.0.0.1", other.port),
        ("10.0.2.2", other.port),
        ("10.0.2.2", 22),
        ("192.0.2.1", 80),
    ] {
        let r = probe(&b, &s.id, host, port).await;
        assert!(r.starts_with("ERR"), "{host}:{port}: {r}");
    }
    assert_eq!(other.accepted.load(Ordering::SeqCst), 0);
    // A name: the guest asks 10.0.2.2, slirp's alias for the namespace's
    // 127.0.0.1:53; the service's answer (NXDOMAIN here) comes back.
    let r = sh(
        &b,
        &s.id,
        "python3 -c \"import socket\ntry:\n socket.getaddrinfo('pypi.example.test',443)\n print('resolved')\nexcept socket.gaierror as e:\n print('gaierror',e.errno)\"",
    )
    .await;
    assert_eq!(
        r.trim(),
        format!("gaierror {}", -2),
        "NXDOMAIN is EAI_NONAME"
    );
    let queries = egress.dns_queries.lock().unwrap().clone();
    assert!(
        queries
            .iter()
            .any(|q| q.windows(7).any(|w| w == b"example")),
        "no query reached the namespace's 127.0.0.1:53: {queries:?}"
    );

    w.step("ports");
    serve(&b, &s.id, &["python3", "-m", "http.server", "8000"], 8000).await;
    let t = Instant::now();
    assert_eq!(http_get(&b, &s.id, 8000).await, "HTTP/1.0 200 OK");
    let first_ms = t.elapsed().as_millis();
    let t = Instant::now();
    for _ in 0..3 {
        let c = b.connect_port(&s.id, 8000).await.unwrap();
        drop(c);
    }
    let again_ms = t.elapsed().as_millis() / 3;
    assert_eq!(b.port_forwards(&s.id).await.unwrap(), vec![8000]);
    // Nothing listening: 502-class error, the guest unharmed.
    let e = b.connect_port(&s.id, 8001).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::PortUnreachable, "{e}");
    assert!(e.message.contains("nothing listens on port 8001"), "{e}");
    serve(
        &b,
        &s.id,
        &[
            "python3",
            "-m",
            "http.server",
            "8002",
            "--bind",
            "127.0.0.1",
        ],
        8002,
    )
    .await;
    let e = b.connect_port(&s.id, 8002).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::PortUnreachable, "{e}");
    assert!(e.message.contains("only on the guest's loopback"), "{e}");
    assert_eq!(
        b.connect_port(&s.id, 0).await.unwrap_err().code,
        ErrorCode::InvalidArgument
    );
    assert_eq!(b.port_forwards(&s.id).await.unwrap(), vec![8000]);
    assert_eq!(sh(&b, &s.id, "echo fine").await.trim(), "fine");

    w.step("a new daemon recovers the running sandbox");
    // The old backend goes away (its QMP and agent connections close; the
    // QEMU keeps running), a new one finds the QEMU again: the egress
    // service is attached to the same namespace again, the forward is
    // known from vm.json and still in QEMU.
    drop(b);
    let b = backend(&img, Some(egress.clone()), false);
    assert_eq!(
        b.recover(&s).await.unwrap(),
        stasis_backend::Recovered::Running
    );
    match egress.events_of(&s.id).last() {
        Some(Event::Attach(i, ino, _)) => assert_eq!((i, *ino), (&s.id, qemu_ns)),
        other => panic!("no attach at recover: {other:?}"),
    }
    assert_eq!(b.port_forwards(&s.id).await.unwrap(), vec![8000]);
    assert_eq!(http_get(&b, &s.id, 8000).await, "HTTP/1.0 200 OK");
    assert_eq!(
        probe(&b, &s.id, "127.0.0.1", allowed.port).await,
        "OK pong-allowed"
    );

    w.step("pause");
    let out = root.path().join("pause");
    b.pause(&s.id, &out, true).await.unwrap();
    assert_eq!(
        egress.events_of(&s.id).last(),
        Some(&Event::Detach(s.id.clone()))
    );
    w.step("resume");
    let t = Instant::now();
    b.resume(&s, &out).await.unwrap();
    let resume_ms = t.elapsed().as_millis();
    let resume_net_ms = b.timings(&s.id).net_ms;
    let pid2 = b.qemu_pid(&s.id).unwrap();
    let ns2 = ns_inode(&format!("/proc/{pid2}/ns/net"));
    // (A new namespace; the kernel may give it the old one's inode.)
    assert_ne!(pid2, pid);
    assert_ne!(ns2, ns_inode("/proc/self/ns/net"));
    assert_eq!(
        egress.events_of(&s.id).last(),
        Some(&Event::Attach(s.id.clone(), ns2, 0))
    );
    // The forward came back with the new QEMU, before anyone asked.
    assert_eq!(b.port_forwards(&s.id).await.unwrap(), vec![8000]);
    // The same server (the guest's memory came back), reached again.
    assert_eq!(http_get(&b, &s.id, 8000).await, "HTTP/1.0 200 OK");
    assert_eq!(
        probe(&b, &s.id, "127.0.0.1", allowed.port).await,
        "OK pong-allowed"
    );

    w.step("destroy");
    b.destroy(&s.id, &s.dir).await.unwrap();
    assert_eq!(
        egress.events_of(&s.id).last(),
        Some(&Event::Detach(s.id.clone()))
    );
    println!(
        "figures: cold create {cold_ms} ms (network setup {cold_net_ms} ms), resume {resume_ms} ms (network setup {resume_net_ms} ms), with NIC and egress attach; connect_port first {first_ms} ms (check + forward + GET), again {again_ms} ms"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn microvm_fail_closed_and_snapshots_without_nic() {
    let Some(img) = image_dir() else { return };
    let w = watchdog::watch("microvm_fail_closed_and_snapshots_without_nic");
    let reaper = Reaper::new();
    let root = tempfile::Builder::new()
        .prefix("stasis-mvm-net0")
        .tempdir_in("/var/tmp")
        .unwrap();
    let sbs = root.path().join("sb");
    let b = backend(&img, None, false);
    let allowed = listener("allowed");

    w.step("create without an egress service");
    let s = spec(
        &sbs,
        &img,
        vec![format!("127.0.0.1:{}", allowed.port)],
        &reaper,
    );
    let t = Instant::now();
    b.create(&s).await.unwrap();
    let nic_ms = t.elapsed().as_millis();
    // The NIC is there, restricted: nothing leaves, not even the allowlist.
    assert!(sh(&b, &s.id, "ls /sys/class/net").await.contains("eth0"));
    for (host, port) in [
        ("127.0.0.1", allowed.port),
        ("10.0.2.2", allowed.port),
        ("192.0.2.1", 80),
    ] {
        let r = probe(&b, &s.id, host, port).await;
        assert!(r.starts_with("ERR"), "{host}:{port}: {r}");
    }
    assert_eq!(allowed.accepted.load(Ordering::SeqCst), 0);
    // Ports come in all the same.
    serve(&b, &s.id, &["python3", "-m", "http.server", "8000"], 8000).await;
    assert_eq!(http_get(&b, &s.id, 8000).await, "HTTP/1.0 200 OK");

    w.step("a format 2 guest with the relays of its time");
    // Format 2 guests with an allowlist had each destination's address on
    // their lo (the old relays); restored today, those addresses go (the
    // NIC reaches such destinations), loopback stays.
    const IP: &str = "B=/run/stasis/busybox; [ -x $B ] || B=/bin/busybox; $B ip";
    sh(&b, &s.id, &format!("{IP} addr add 192.0.2.7/32 dev lo")).await;
    let lo = sh(&b, &s.id, &format!("{IP} -4 addr show dev lo")).await;
    assert!(lo.contains("192.0.2.7"), "{lo}");
    let snap = root.path().join("snap-relays");
    b.snapshot(&s.id, &snap).await.unwrap();
    b.destroy(&s.id, &s.dir).await.unwrap();
    let mut meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(snap.join("meta.json")).unwrap()).unwrap();
    assert_eq!(
        (meta["format"].as_u64(), meta["network"].as_bool()),
        (Some(4), Some(true))
    );
    meta["format"] = 2.into();
    std::fs::write(snap.join("meta.json"), serde_json::to_vec(&meta).unwrap()).unwrap();
    let f = spec(&sbs, &img, Vec::new(), &reaper);
    b.restore(&f, &snap).await.unwrap();
    let lo = sh(&b, &f.id, &format!("{IP} -4 addr show dev lo")).await;
    assert!(
        !lo.contains("192.0.2.7") && lo.contains("127.0.0.1"),
        "{lo}"
    );
    b.destroy(&f.id, &f.dir).await.unwrap();

    w.step("a guest without a NIC, snapshotted");
    let old = backend(&img, None, true);
    let o = spec(&sbs, &img, Vec::new(), &reaper);
    let t = Instant::now();
    old.create(&o).await.unwrap();
    let no_nic_ms = t.elapsed().as_millis();
    assert_eq!(sh(&old, &o.id, "ls /sys/class/net").await.trim(), "lo");
    let p = root.path().join("p");
    old.pause(&o.id, &p, true).await.unwrap();
    let t = Instant::now();
    old.resume(&o, &p).await.unwrap();
    let no_nic_resume_ms = t.elapsed().as_millis();
    println!(
        "figures: cold create {no_nic_ms} ms without a NIC (as before), {nic_ms} ms with a restricted NIC; resume {no_nic_resume_ms} ms without a NIC"
    );
    sh(&old, &o.id, "echo kept > /root/mark").await;
    let snap = root.path().join("snap");
    old.snapshot(&o.id, &snap).await.unwrap();
    old.destroy(&o.id, &o.dir).await.unwrap();
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(snap.join("meta.json")).unwrap()).unwrap();
    assert_eq!(
        (meta["format"].as_u64(), meta["network"].as_bool()),
        (Some(2), Some(false))
    );

    w.step("restored by today's backend");
    let r = spec(&sbs, &img, Vec::new(), &reaper);
    b.restore(&r, &snap).await.unwrap();
    assert_eq!(sh(&b, &r.id, "cat /root/mark").await.trim(), "kept");
    assert_eq!(sh(&b, &r.id, "ls /sys/class/net").await.trim(), "lo");
    let e = b.connect_port(&r.id, 8000).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::Unsupported, "{e}");
    assert!(e.message.contains("no network interface"), "{e}");
    // Snapshotted again, it stays format 2 without a NIC.
    let snap2 = root.path().join("snap2");
    b.snapshot(&r.id, &snap2).await.unwrap();
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(snap2.join("meta.json")).unwrap()).unwrap();
    assert_eq!(
        (meta["format"].as_u64(), meta["network"].as_bool()),
        (Some(2), Some(false))
    );
    b.destroy(&r.id, &r.dir).await.unwrap();
}
