//! The manifest's boundaries on a real microVM (needs `STASIS_IMAGE_DIR`,
//! like tests/vm.rs; without it the test says it did not run and passes).
//!
//! One VM carries every boundary at once (TCG boots cost seconds): an egress
//! allowlist of one host loopback port (served by the test egress service
//! of `support/test_egress.rs`, as the daemon's serves it), a read-only
//! directory and a
//! read-only file, an output directory, a 32 MiB disk quota and a pids cap.
//! Each escape attempt prints `denied: <what>`; listeners on the host count
//! the connections that reach them, so a denial is proven on the host side
//! too, not only by the guest's failure. The egress checks are repeated
//! after pause/resume and in a fork restored from a snapshot (its own QEMU,
//! namespace and attachment).

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use stasis_backend::{Backend, SandboxSpec};
use stasis_backend_microvm::{AccelChoice, MicrovmBackend, MicrovmConfig};
use stasis_core::manifest::Mount;
use stasis_core::{ErrorCode, ExecRequest, ExecResult, Manifest, SandboxId};

#[path = "support/test_egress.rs"]
mod test_egress;

fn image_dir() -> Option<PathBuf> {
    match std::env::var_os("STASIS_IMAGE_DIR") {
        Some(d) if !d.is_empty() => Some(PathBuf::from(d)),
        _ => {
            let msg = b"stasis-backend-microvm: STASIS_IMAGE_DIR not set: boundary tests NOT RUN\n";
            unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
            None
        }
    }
}

/// A loopback listener that answers every line with `pong-<name>` and counts
/// the connections it accepted.
struct Listener {
    name: &'static str,
    port: u16,
    accepted: Arc<AtomicUsize>,
}

fn listener(name: &'static str) -> Listener {
    serve(TcpListener::bind("127.0.0.1:0").unwrap(), name)
}

fn listener6(name: &'static str) -> Listener {
    serve(TcpListener::bind("[::1]:0").unwrap(), name)
}

fn serve(l: TcpListener, name: &'static str) -> Listener {
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
                    let mut c = c;
                    let _ = c.write_all(format!("pong-{name}\n").as_bytes());
                }
            });
        }
    });
    Listener {
        name,
        port,
        accepted,
    }
}

struct Cleanup(Arc<MicrovmBackend>, Vec<(SandboxId, PathBuf)>);
impl Drop for Cleanup {
    fn drop(&mut self) {
        for (id, dir) in &self.1 {
            if let Some(pid) = self.0.qemu_pid(id) {
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

async fn exec(b: &MicrovmBackend, id: &SandboxId, cmd: &str, timeout_ms: u64) -> ExecResult {
    b.exec(
        id,
        ExecRequest {
            argv: vec!["sh".into(), "-c".into(), cmd.into()],
            env: Default::default(),
            cwd: None,
            timeout_ms,
            stdin: None,
            user: None,
        },
        None,
    )
    .await
    .unwrap_or_else(|e| panic!("exec {cmd:?}: {e}"))
}

fn out(r: &ExecResult) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&r.stdout),
        String::from_utf8_lossy(&r.stderr)
    )
}

/// Python in the guest: one line per destination, "OK <reply>" or "FAIL <why>".
const PROBE: &str = r#"
import socket, sys
for dest in sys.argv[1:]:
    host, port = dest.rsplit(":", 1)
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    s.settimeout(4)
    try:
        s.connect((host.strip("[]"), int(port)))
        s.sendall(b"ping\n")
        d = s.recv(100)
        print(dest, "OK " + d.decode().strip() if d else "FAIL closed without reply")
    except Exception as e:
        print(dest, "FAIL", type(e).__name__, e)
    s.close()
"#;

/// Try each destination from the guest; returns (dest, outcome) lines.
async fn probe(b: &MicrovmBackend, id: &SandboxId, dests: &[String]) -> Vec<(String, String)> {
    let r = exec(
        b,
        id,
        &format!("python3 /tmp/probe.py {}", dests.join(" ")),
        60_000,
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "probe: {}", out(&r));
    String::from_utf8_lossy(&r.stdout)
        .lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(d, o)| (d.to_string(), o.to_string()))
        .collect()
}

/// Egress from one sandbox: the allowlisted port answers; every other
/// destination fails and the non-allowlisted host listener sees nothing.
async fn check_egress(
    b: &MicrovmBackend,
    id: &SandboxId,
    allowed: &Listener,
    other: &Listener,
    when: &str,
    denied: &mut usize,
) {
    b.write_file(id, "/tmp/probe.py", PROBE.as_bytes(), None)
        .await
        .unwrap();
    let before_other = other.accepted.load(Ordering::SeqCst);
    let before_allowed = allowed.accepted.load(Ordering::SeqCst);
    let (p, q) = (allowed.port, other.port);
    let dests = vec![
        format!("127.0.0.1:{p}"),
        // The host's loopback through slirp's host alias, which the guest
        // relay above uses: the allowlisted port only.
        format!("10.0.2.2:{p}"),
        format!("10.0.2.2:{q}"),
        // A non-allowlisted host port under the allowlisted address.
        format!("127.0.0.1:{q}"),
        // The relay address of old guests, on any port.
        format!("10.0.2.100:{q}"),
        // slirp's DNS proxy address (it finds no resolv.conf in the jail).
        "10.0.2.3:53".to_string(),
    ];
    let res = probe(b, id, &dests).await;
    assert_eq!(res.len(), dests.len(), "{res:?}");
    for (d, o) in &res[..2] {
        assert_eq!(
            o,
            &format!("OK pong-{}", allowed.name),
            "{when}: allowlisted destination {d} must work: {res:?}"
        );
    }
    for (d, o) in &res[2..] {
        assert!(o.starts_with("FAIL"), "{when}: {d} must be denied: {o}");
        println!("denied: {when}: egress to {d} ({o})");
        *denied += 1;
    }
    assert_eq!(
        other.accepted.load(Ordering::SeqCst),
        before_other,
        "{when}: the non-allowlisted host listener was reached"
    );
    assert_eq!(
        allowed.accepted.load(Ordering::SeqCst),
        before_allowed + 2,
        "{when}: the allowlisted listener must see exactly the two allowed connections"
    );
    // Nothing QEMU might fork (it forks nothing now) piles up as a zombie
    // in its pid namespace.
    let pid = b.qemu_pid(id).unwrap();
    let mut left = zombies_beside(pid);
    for _ in 0..100 {
        if left.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        left = zombies_beside(pid);
    }
    assert!(left.is_empty(), "{when}: unreaped relays {left:?}");
}

/// Zombie processes in the pid namespace of `pid`.
fn zombies_beside(pid: i32) -> Vec<i32> {
    let ns = |p: i32| std::fs::read_link(format!("/proc/{p}/ns/pid")).ok();
    let want = ns(pid);
    assert!(want.is_some());
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter(|p| ns(*p) == want)
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit(')')
                        .next()
                        .map(|r| r.trim_start().starts_with('Z'))
                })
                .unwrap_or(false)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn microvm_boundaries_hold() {
    let Some(img) = image_dir() else { return };
    let root = tempfile::Builder::new()
        .prefix("stasis-mvm-bounds")
        .tempdir_in("/var/tmp")
        .unwrap();
    let inputs = root.path().join("inputs");
    std::fs::create_dir_all(inputs.join("data/sub")).unwrap();
    std::fs::write(inputs.join("data/hello.txt"), "input v1\n").unwrap();
    std::fs::write(inputs.join("data/sub/n.txt"), "nested\n").unwrap();
    std::fs::write(inputs.join("config.json"), "{\"k\": 1}\n").unwrap();
    std::fs::create_dir_all(root.path().join("forbidden")).unwrap();

    let mut c = MicrovmConfig::new(img.parent().unwrap());
    c.accel = AccelChoice::Tcg;
    c.boot_timeout = Duration::from_secs(120);
    c.agent_timeout = Duration::from_secs(60);
    c.mount_roots = vec![inputs.clone()];
    let sb_dirs = root.path().join("sb");
    c.egress = Some(test_egress::TestEgress::new(sb_dirs.clone()));
    let b = Arc::new(MicrovmBackend::new(c));
    let mut cleanup = Cleanup(b.clone(), Vec::new());

    let allowed = listener("allowed");
    let allowed6 = listener6("allowed6");
    let other = listener("other");
    let mut denied = 0usize;
    let mut spec_for = |m: Manifest| {
        let id = SandboxId::generate();
        let dir = sb_dirs.join(id.as_str());
        std::fs::create_dir_all(&dir).unwrap();
        cleanup.1.push((id.clone(), dir.clone()));
        SandboxSpec {
            id,
            manifest: m,
            dir,
        }
    };

    let mut m = Manifest {
        image: Some(img.display().to_string()),
        ..Default::default()
    };
    // A mount outside the allowed root is refused before anything starts.
    m.mounts = vec![Mount {
        source: root.path().join("forbidden").display().to_string(),
        target: "/in".into(),
    }];
    let e = b.create(&spec_for(m.clone())).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidManifest, "{e}");
    assert_eq!(e.field.as_deref(), Some("mounts[0].source"), "{e}");
    println!("denied: mount source outside the allowed roots ({e})");
    denied += 1;

    m.mounts = vec![
        Mount {
            source: inputs.join("data").display().to_string(),
            target: "/in".into(),
        },
        Mount {
            source: inputs.join("config.json").display().to_string(),
            target: "/etc/app/config.json".into(),
        },
    ];
    m.outputs = vec!["/out".into()];
    m.network.allow = vec![
        format!("127.0.0.1:{}", allowed.port),
        format!("[::1]:{}", allowed6.port),
    ];
    m.resources.disk_mb = 32;
    m.resources.pids = 64;
    m.resources.cpus = 2.0;
    let a = spec_for(m.clone());
    b.create(&a).await.expect("create");
    // resources.cpus becomes whole vCPUs (as many as the host has, at most).
    let r = exec(&b, &a.id, "nproc", 20_000).await;
    assert_eq!(
        out(&r).trim(),
        stasis_backend_microvm::vcpus_for(&m).to_string(),
        "vCPUs"
    );

    // Inputs are readable and cannot be written, even by guest root.
    let r = exec(
        &b,
        &a.id,
        "cat /in/hello.txt /in/sub/n.txt /etc/app/config.json",
        20_000,
    )
    .await;
    assert_eq!(out(&r), "input v1\nnested\n{\"k\": 1}\n");
    for (what, cmd) in [
        ("write into a read-only mount", "echo x > /in/new.txt"),
        ("overwrite a read-only file", "echo x > /in/hello.txt"),
        ("overwrite a read-only file mount", "echo x > /etc/app/config.json"),
        ("remount a read-only mount rw", "mount -o remount,rw /in"),
        (
            "write the read-only input disk directly",
            "dev=$(awk '$2==\"/in\"{print $1}' /proc/mounts); dd if=/dev/zero of=$dev bs=4096 count=1 conv=notrunc",
        ),
    ] {
        let r = exec(&b, &a.id, cmd, 20_000).await;
        assert_ne!(r.exit_code, Some(0), "{what}: {}", out(&r));
        println!("denied: {what} ({})", out(&r).trim());
        denied += 1;
    }
    let r = exec(&b, &a.id, "cat /in/hello.txt", 20_000).await;
    assert_eq!(out(&r), "input v1\n");
    // The output directory exists and is writable.
    let r = exec(
        &b,
        &a.id,
        "echo result > /out/r.txt && cat /out/r.txt",
        20_000,
    )
    .await;
    assert_eq!(out(&r), "result\n");
    // Outputs are collected from the output directory only: a symlink is
    // kept as a link (never followed), a fifo is left out.
    let r = exec(
        &b,
        &a.id,
        "ln -s /etc/shadow /out/link && mkfifo /out/fifo && mkdir -p /out/d && echo n > /out/d/n",
        20_000,
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "{}", out(&r));
    let tarball = root.path().join("outputs.tar");
    b.collect_outputs_tar(&a.id, &tarball)
        .await
        .expect("outputs");
    let mut ar = tar::Archive::new(std::fs::File::open(&tarball).unwrap());
    let mut names: Vec<String> = Vec::new();
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        let n = e.path().unwrap().display().to_string();
        if n == "out/link" {
            assert!(e.header().entry_type().is_symlink());
            assert_eq!(
                e.link_name().unwrap().unwrap().to_str(),
                Some("/etc/shadow")
            );
        }
        if n == "out/r.txt" {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut e, &mut s).unwrap();
            assert_eq!(s, "result\n");
        }
        names.push(n);
    }
    names.sort();
    assert_eq!(
        names,
        ["out/", "out/d/", "out/d/n", "out/link", "out/r.txt"]
    );

    check_egress(&b, &a.id, &allowed, &other, "fresh", &mut denied).await;
    // The host's IPv6 loopback is not relayed (slirp runs IPv4 only): the
    // guest's own [::1] has nothing there.
    let res = probe(&b, &a.id, &[format!("[::1]:{}", allowed6.port)]).await;
    assert!(res[0].1.starts_with("FAIL"), "{res:?}");
    assert_eq!(allowed6.accepted.load(Ordering::SeqCst), 0);

    // Disk quota: filling the disk ends in ENOSPC inside the guest; the VM
    // keeps working and the host file stays within the disk's virtual size.
    let r = exec(
        &b,
        &a.id,
        "dd if=/dev/urandom of=/workspace/fill bs=1M count=1024 2>&1; sync",
        120_000,
    )
    .await;
    let o = out(&r);
    assert!(o.contains("No space left on device"), "disk fill: {o}");
    println!("denied: writing past the disk quota (ENOSPC)");
    denied += 1;
    let r = exec(&b, &a.id, "rm /workspace/fill && echo alive", 20_000).await;
    assert_eq!(out(&r), "alive\n");
    let disk = std::fs::metadata(a.dir.join("disk.qcow2")).unwrap().len();
    let virt =
        stasis_backend_microvm::boundary::qcow2_virtual_size(&a.dir.join("disk.qcow2")).unwrap();
    let base_virt =
        stasis_backend_microvm::boundary::qcow2_virtual_size(&img.join("rootfs.qcow2")).unwrap();
    assert_eq!(virt, base_virt + (32 << 20));
    assert!(disk < virt + (16 << 20), "overlay {disk} > virtual {virt}");
    println!(
        "disk: overlay {} MiB after the fill, virtual {} MiB",
        disk >> 20,
        virt >> 20
    );

    // Fork bomb: contained by the pids cap; the guest and agent answer after.
    let r = exec(&b, &a.id, "f() { f | f & }; f; sleep 5", 8_000).await;
    let _ = r;
    let ev = b
        .read_file(&a.id, "/sys/fs/cgroup/stasis/pids.events", 4096)
        .await
        .unwrap();
    let ev = String::from_utf8_lossy(&ev).to_string();
    let hits: u64 = ev
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    assert!(hits > 0, "the pids cap was never hit: {ev}");
    b.write_file(&a.id, "/sys/fs/cgroup/stasis/cgroup.kill", b"1", None)
        .await
        .unwrap();
    let r = exec(
        &b,
        &a.id,
        "cat /sys/fs/cgroup/stasis/pids.max; echo alive",
        20_000,
    )
    .await;
    assert_eq!(out(&r), "64\nalive\n");
    println!("denied: fork bomb beyond 64 processes ({hits} forks refused)");
    denied += 1;

    // Pause (migration with the NIC) and resume: everything still holds.
    let p1 = root.path().join("p1");
    b.pause(&a.id, &p1, true).await.expect("pause");
    let e = b
        .collect_outputs_tar(&a.id, &root.path().join("o2.tar"))
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidState, "{e}");
    b.resume(&a, &p1).await.expect("resume");
    check_egress(&b, &a.id, &allowed, &other, "after resume", &mut denied).await;
    let r = exec(
        &b,
        &a.id,
        "cat /in/hello.txt; (echo x > /in/y) 2>/dev/null || echo ro",
        20_000,
    )
    .await;
    assert_eq!(out(&r), "input v1\nro\n");
    println!("denied: after resume: write into a read-only mount");
    denied += 1;

    // A fork restored from a snapshot gets its own netdev, and its input
    // disk is rebuilt from the (changed) source and remounted.
    let snap = root.path().join("snap");
    b.snapshot(&a.id, &snap).await.expect("snapshot");
    std::fs::write(inputs.join("data/hello.txt"), "input v2\n").unwrap();
    let f = spec_for(m.clone());
    b.restore(&f, &snap).await.expect("restore");
    check_egress(&b, &f.id, &allowed, &other, "fork", &mut denied).await;
    let r = exec(&b, &f.id, "cat /in/hello.txt", 20_000).await;
    assert_eq!(out(&r), "input v2\n");
    // The parent still runs, with its egress, after the fork.
    check_egress(
        &b,
        &a.id,
        &allowed,
        &other,
        "parent after fork",
        &mut denied,
    )
    .await;

    // A fork restored under another allowlist: its egress attachment
    // serves the new one only, and the guest's relays follow it.
    let mut swapped = m.clone();
    swapped.network.allow = vec![format!("127.0.0.1:{}", other.port)];
    let f2 = spec_for(swapped);
    b.restore(&f2, &snap)
        .await
        .expect("restore with another allowlist");
    check_egress(
        &b,
        &f2.id,
        &other,
        &allowed,
        "fork with another allowlist",
        &mut denied,
    )
    .await;
    b.destroy(&f2.id, &f2.dir).await.unwrap();

    // Every guest has its NIC: a memory restore under an empty allowlist
    // loads (the same devices) and reaches nothing.
    let mut no_net = m.clone();
    no_net.network.allow.clear();
    let g = spec_for(no_net);
    b.restore(&g, &snap)
        .await
        .expect("restore without an allowlist");
    b.write_file(&g.id, "/tmp/probe.py", PROBE.as_bytes(), None)
        .await
        .unwrap();
    let before = allowed.accepted.load(Ordering::SeqCst);
    for (d, o) in probe(&b, &g.id, &[format!("127.0.0.1:{}", allowed.port)]).await {
        assert!(o.starts_with("FAIL"), "empty allowlist: {d}: {o}");
    }
    assert_eq!(allowed.accepted.load(Ordering::SeqCst), before);
    b.destroy(&g.id, &g.dir).await.unwrap();

    for (id, dir) in [(&a.id, &a.dir), (&f.id, &f.dir)] {
        b.destroy(id, dir).await.unwrap();
    }
    println!("boundary attempts denied: {denied} (all)");
}

/// `/proc/<pid>/status` fields of a process.
fn status_of(pid: i32) -> std::collections::HashMap<String, String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// Every non-directory entry below `root`, as paths inside it ("/usr/...").
fn tree(root: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![PathBuf::from("/")];
    while let Some(rel) = stack.pop() {
        let abs = root.join(rel.strip_prefix("/").unwrap());
        for e in std::fs::read_dir(&abs).unwrap().flatten() {
            let p = rel.join(e.file_name());
            if e.file_type().unwrap().is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// Issue 20 item 9: the QEMU of a sandbox runs with least privilege. Checked
/// from the host through /proc: its uid/gid (not 0, no groups, no
/// capabilities), its namespaces (none shared with this process), its
/// seccomp filter and no_new_privs, and its filesystem view (no host file but
/// the ones it needs). Pause/resume/snapshot/restore keep every property, the
/// memory state travels through a passed descriptor (QEMU sees no snapshot
/// directory) and artifacts stay root-owned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn microvm_qemu_runs_jailed() {
    let Some(img) = image_dir() else { return };
    let root = tempfile::Builder::new()
        .prefix("stasis-mvm-jail")
        .tempdir_in("/var/tmp")
        .unwrap();
    let mut c = MicrovmConfig::new(img.parent().unwrap());
    c.accel = AccelChoice::Tcg;
    c.boot_timeout = Duration::from_secs(120);
    c.agent_timeout = Duration::from_secs(60);
    let range = c.jail.expect("the jail is on by default");
    let b = Arc::new(MicrovmBackend::new(c));
    let mut cleanup = Cleanup(b.clone(), Vec::new());
    let mut spec_for = || {
        let id = SandboxId::generate();
        let dir = root.path().join("sb").join(id.as_str());
        std::fs::create_dir_all(&dir).unwrap();
        cleanup.1.push((id.clone(), dir.clone()));
        SandboxSpec {
            id,
            manifest: Manifest {
                image: Some(img.display().to_string()),
                ..Default::default()
            },
            dir,
        }
    };
    let a = spec_for();
    let r = spec_for();
    b.create(&a).await.expect("create");

    let qemu = std::fs::canonicalize(
        std::env::split_paths(&std::env::var_os("PATH").unwrap())
            .map(|d| d.join("qemu-system-x86_64"))
            .find(|p| p.is_file())
            .unwrap(),
    )
    .unwrap();
    let libs = stasis_backend_microvm::jail::libraries(&qemu).unwrap();
    let check = |pid: i32, dir: &std::path::Path, other: &std::path::Path| -> u32 {
        let st = status_of(pid);
        let ids = |k: &str| -> Vec<u32> {
            st[k]
                .split_whitespace()
                .map(|x| x.parse().unwrap())
                .collect()
        };
        let uids = ids("Uid");
        let gids = ids("Gid");
        assert!(
            uids.iter().all(|u| *u == uids[0]) && gids.iter().all(|g| *g == uids[0]),
            "uids {uids:?} gids {gids:?}"
        );
        assert!(
            (range.uid_base..range.uid_base + range.uid_count).contains(&uids[0]),
            "uid {} outside the QEMU range",
            uids[0]
        );
        assert_eq!(st["Groups"], "", "supplementary groups");
        assert_eq!(st["Seccomp"], "2", "no seccomp filter");
        assert_eq!(st["NoNewPrivs"], "1");
        for cap in ["CapPrm", "CapEff", "CapAmb"] {
            assert_eq!(u64::from_str_radix(&st[cap], 16).unwrap(), 0, "{cap}");
        }
        for ns in ["mnt", "pid", "ipc", "uts", "net", "cgroup"] {
            let theirs = std::fs::read_link(format!("/proc/{pid}/ns/{ns}")).unwrap();
            let ours = std::fs::read_link(format!("/proc/self/ns/{ns}")).unwrap();
            assert_ne!(theirs, ours, "QEMU shares the {ns} namespace");
        }
        // The daemon still finds its QEMUs by working directory.
        assert_eq!(
            stasis_backend_microvm::util::cwd(pid).as_deref(),
            Some(dir),
            "cwd"
        );
        // Its filesystem: no host secret, no other sandbox, nothing but
        // what it needs.
        let jr = PathBuf::from(format!("/proc/{pid}/root"));
        assert!(std::fs::metadata(jr.join("etc/shadow")).is_err());
        assert!(std::fs::read_dir(jr.join("etc")).is_err(), "/etc visible");
        assert!(!jr.join(other.strip_prefix("/").unwrap()).exists());
        assert!(!jr.join("proc/1").exists() && !jr.join("home").exists());
        let allowed = |p: &std::path::Path| {
            p.starts_with(dir)
                || p.starts_with("/dev")
                || libs.iter().any(|l| l == p)
                || p == qemu
                || p == std::path::Path::new("/usr/share/qemu/qboot.rom")
                || ["vmlinux", "initrd.img", "rootfs.qcow2"]
                    .iter()
                    .any(|f| p == img.join(f))
        };
        let files = tree(&jr);
        let extra: Vec<_> = files.iter().filter(|p| !allowed(p)).collect();
        assert!(
            extra.is_empty(),
            "QEMU sees host files it does not need: {extra:?}"
        );
        assert!(files.iter().any(|p| p == &qemu), "{files:?}");
        // It cannot write outside its sandbox directory: the root is read-only.
        let root_ro = std::fs::read_to_string(format!("/proc/{pid}/mountinfo"))
            .unwrap()
            .lines()
            .any(|l| l.split_whitespace().nth(4) == Some("/") && l.contains(" ro,"));
        assert!(root_ro, "the jail root is writable");
        uids[0]
    };
    let pid = b.qemu_pid(&a.id).unwrap();
    let uid_a = check(pid, &a.dir, &r.dir);
    let md = std::fs::metadata(a.dir.join("disk.qcow2")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(md.uid(), uid_a, "the overlay belongs to the QEMU uid");
    let out = exec(
        &b,
        &a.id,
        "echo jailed > /workspace/j.txt && cat /workspace/j.txt",
        20_000,
    )
    .await;
    assert_eq!(out.exit_code, Some(0), "{}", crate::out(&out));

    // Pause + resume: the memory state is written through a descriptor the
    // daemon opened; the artifacts belong to root; the new QEMU is jailed.
    let p = root.path().join("pause");
    std::fs::create_dir_all(&p).unwrap();
    b.pause(&a.id, &p, true).await.expect("pause");
    for f in ["memory.state", "disk.qcow2", "meta.json"] {
        let md = std::fs::metadata(p.join(f)).unwrap();
        assert_eq!((md.uid(), md.mode() & 0o777), (0, 0o644), "{f}");
    }
    b.resume(&a, &p).await.expect("resume");
    let pid = b.qemu_pid(&a.id).unwrap();
    check(pid, &a.dir, &r.dir);
    let out = exec(&b, &a.id, "cat /workspace/j.txt", 20_000).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "jailed\n");

    // Snapshot + restore into a second sandbox: both run, each in its own
    // jail, under different uids, neither seeing the other's directory.
    let s = root.path().join("snap");
    std::fs::create_dir_all(&s).unwrap();
    b.snapshot(&a.id, &s).await.expect("snapshot");
    for f in ["memory.state", "memory.ram", "disk.qcow2", "meta.json"] {
        if f == "memory.ram" && !s.join(f).exists() {
            continue; // a resumed guest's RAM is a private mapping: streamed
        }
        let md = std::fs::metadata(s.join(f)).unwrap();
        assert_eq!((md.uid(), md.mode() & 0o777), (0, 0o644), "{f}");
    }
    b.restore(&r, &s).await.expect("restore");
    let (pa, pr) = (b.qemu_pid(&a.id).unwrap(), b.qemu_pid(&r.id).unwrap());
    let (ua, ur) = (check(pa, &a.dir, &r.dir), check(pr, &r.dir, &a.dir));
    assert_ne!(ua, ur, "two QEMUs share a uid");
    let out = exec(&b, &r.id, "cat /workspace/j.txt", 20_000).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "jailed\n");
    let out = exec(&b, &a.id, "cat /workspace/j.txt", 20_000).await;
    assert_eq!(String::from_utf8_lossy(&out.stdout), "jailed\n");
    // The jail's init (pid 1 of QEMU's namespace, our child) leaves with
    // QEMU and is reaped: no process of either kind stays behind.
    let me = std::process::id().to_string();
    let mut inits = Vec::new();
    for q in [pa, pr] {
        let init: i32 = status_of(q)["PPid"].parse().unwrap();
        let st = status_of(init);
        assert_eq!(st["Name"], "stasis-jail");
        assert_eq!(st["PPid"], me, "the init is the daemon's child");
        assert_ne!(
            st["Uid"].split_whitespace().next(),
            Some("0"),
            "init runs as root"
        );
        inits.push(init);
    }
    for sb in [&a, &r] {
        b.destroy(&sb.id, &sb.dir).await.unwrap();
    }
    for p in inits.into_iter().chain([pa, pr]) {
        assert!(
            status_of_opt(p).is_empty(),
            "{p} outlived its sandbox: {:?}",
            status_of_opt(p).get("State")
        );
    }
}

fn status_of_opt(pid: i32) -> std::collections::HashMap<String, String> {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}
