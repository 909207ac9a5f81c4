//! Process sandboxes run in their own user namespace: root inside is an
//! unprivileged host uid/gid range, and the sandbox still works as before.
mod common;
use common::*;

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use stasis_backend::{Backend, SandboxSpec};
use stasis_backend_process::ProcessBackend;
use stasis_core::manifest::Mount;
use stasis_core::{Manifest, SessionSpec};

fn init_pid(spec: &SandboxSpec) -> i32 {
    std::fs::read_to_string(spec.dir.join("run/init.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// `(host id of inside 0, range size)` from a map file, checking the single
/// line maps inside 0.. to an unprivileged host range.
fn map_of(pid: i32, which: &str) -> (u32, u32) {
    let m = std::fs::read_to_string(format!("/proc/{pid}/{which}")).unwrap();
    let lines: Vec<Vec<u32>> = m
        .lines()
        .map(|l| l.split_whitespace().map(|x| x.parse().unwrap()).collect())
        .collect();
    assert_eq!(lines.len(), 1, "{which}: {m}");
    assert_eq!(lines[0][0], 0, "{which}: {m}");
    assert!(lines[0][1] >= 100_000, "{which} maps to a system id: {m}");
    (lines[0][1], lines[0][2])
}

/// The real, effective, saved and fs ids of a host pid (`Uid:`/`Gid:`).
fn status_ids(pid: i32, key: &str) -> Vec<u32> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap()
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect()
}

fn assert_runs_as(pid: i32, host: u32) {
    assert_eq!(status_ids(pid, "Uid:"), vec![host; 4], "pid {pid}");
    assert_eq!(status_ids(pid, "Gid:"), vec![host; 4], "pid {pid}");
    assert_eq!(map_of(pid, "uid_map").0, host);
    assert_eq!(map_of(pid, "gid_map").0, host);
}

fn ino(p: &str) -> u64 {
    std::fs::metadata(p).unwrap().ino()
}

/// Inode of the user namespace owning namespace file `p` (NS_GET_USERNS).
fn owner_userns(p: &str) -> u64 {
    let f = std::fs::File::open(p).unwrap();
    let fd = unsafe { libc::ioctl(std::os::fd::AsRawFd::as_raw_fd(&f), 0xb701) };
    assert!(
        fd >= 0,
        "NS_GET_USERNS {p}: {}",
        std::io::Error::last_os_error()
    );
    let f = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    f.metadata().unwrap().ino()
}

/// Make host file `src` visible at `target` inside a sandbox's mount
/// namespace with a plain bind mount (no idmapping): what a bug that leaked
/// a host file into the sandbox's view would look like.
fn inject_bind(pid: i32, src: &Path, target: &str) {
    let csrc = CString::new(src.to_str().unwrap()).unwrap();
    let ctgt = CString::new(target).unwrap();
    let nsp = CString::new(format!("/proc/{pid}/ns/mnt")).unwrap();
    unsafe {
        let ns = libc::open(nsp.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        assert!(ns >= 0);
        let tree = libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            csrc.as_ptr(),
            1u32 | libc::O_CLOEXEC as u32, // OPEN_TREE_CLONE
        );
        assert!(tree >= 0, "open_tree: {}", std::io::Error::last_os_error());
        // setns(mnt) wants a single-threaded caller: a forked child.
        let child = libc::fork();
        if child == 0 {
            if libc::setns(ns, libc::CLONE_NEWNS) != 0 {
                libc::_exit(1);
            }
            let rc = libc::syscall(
                libc::SYS_move_mount,
                tree as i32,
                c"".as_ptr(),
                libc::AT_FDCWD,
                ctgt.as_ptr(),
                0x4u32, // MOVE_MOUNT_F_EMPTY_PATH
            );
            libc::_exit(if rc == 0 { 0 } else { 2 });
        }
        let mut st = 0;
        libc::waitpid(child, &mut st, 0);
        libc::close(tree as i32);
        libc::close(ns);
        assert!(
            libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0,
            "inject bind: {st}"
        );
    }
}

fn session(argv: &[&str]) -> SessionSpec {
    SessionSpec {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        env: BTreeMap::new(),
        cwd: None,
        pty: None,
        user: None,
    }
}

async fn read_until(be: &ProcessBackend, spec: &SandboxSpec, sid: &str, needle: &str) -> String {
    let (mut text, mut off) = (String::new(), 0);
    let t = Instant::now();
    while !text.contains(needle) {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "no {needle:?} in {text:?}"
        );
        let o = be.session_read(&spec.id, sid, off, wait()).await.unwrap();
        text.push_str(&String::from_utf8_lossy(&o.data));
        off = o.next_offset;
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn root_inside_is_an_unprivileged_host_uid_without_host_powers() {
    let e = env("userns");
    let spec = e.create().await;
    let id = &spec.id;
    let r = run(&e, &spec, sh("id -u; id -g; cat /proc/self/uid_map")).await;
    let o = out(&r);
    assert!(o.starts_with("0\n0\n"), "{o}");

    // From the host: PID 1 and every process run in the sandbox are the
    // sandbox's host uid/gid, in a user namespace mapping 0 to it.
    let pid1 = init_pid(&spec);
    let (host, size) = map_of(pid1, "uid_map");
    assert_eq!(size, 65_536);
    assert_runs_as(pid1, host);
    let s =
        e.be.session_start(id, session(&["sleep", "86399.25"]))
            .await
            .unwrap();
    let t = Instant::now();
    let sleeper = loop {
        if let Some(p) = host_pids_with("sleep 86399.25").first() {
            break *p;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "session not found");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_runs_as(sleeper, host);
    // The sandbox's own id ranges are distinct.
    let other = e.create().await;
    let (host2, _) = map_of(init_pid(&other), "uid_map");
    assert!(
        host2.abs_diff(host) >= 65_536,
        "ranges overlap: {host} {host2}"
    );

    // Its user namespace is not the host's, and all its other namespaces
    // belong to the host's: root inside has no capability over its mounts,
    // network, hostname, IPC or PID namespace whatever seccomp lets through.
    let host_userns = ino("/proc/self/ns/user");
    assert_ne!(ino(&format!("/proc/{pid1}/ns/user")), host_userns);
    for ns in ["mnt", "net", "uts", "ipc", "pid", "cgroup"] {
        assert_eq!(
            owner_userns(&format!("/proc/{pid1}/ns/{ns}")),
            host_userns,
            "{ns} namespace is owned by the sandbox"
        );
    }

    // A root-only host file made visible in its view stays unreadable: its
    // owner (host root) is not mapped, so it is nobody's, 0600.
    let secret = e.tmp.path().join("secret");
    std::fs::write(&secret, b"host secret\n").unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    e.be.write_file(id, "/hostsecret", b"", None).await.unwrap();
    inject_bind(pid1, &secret, "/hostsecret");
    let r = run(
        &e,
        &spec,
        sh("stat -c '%u %g %a' /hostsecret; cat /hostsecret 2>&1; \
            cat /proc/1/root/hostsecret 2>&1; chmod 644 /hostsecret 2>&1; \
            chown 0:0 /hostsecret 2>&1; sh -c 'echo x >> /hostsecret' 2>&1; \
            python3 -c 'open(\"/hostsecret\").read()' 2>&1 | tail -1"),
    )
    .await;
    let o = out(&r);
    assert!(!o.contains("host secret"), "{o}");
    let lines: Vec<&str> = o.lines().collect();
    assert_eq!(lines[0], "65534 65534 600", "{o}");
    assert!(lines[1].ends_with("Permission denied"), "{o}");
    assert!(lines[2].ends_with("Permission denied"), "{o}");
    assert!(lines[3].ends_with("Operation not permitted"), "{o}");
    assert!(lines[4].ends_with("Operation not permitted"), "{o}");
    assert!(lines[5].ends_with("Permission denied"), "{o}");
    assert!(lines[6].starts_with("PermissionError"), "{o}");
    assert_eq!(std::fs::read(&secret).unwrap(), b"host secret\n");
    assert_eq!(
        std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777,
        0o600
    );

    // No host powers: hostname, mounts, modules, new namespaces.
    let host_name = nix::unistd::gethostname().unwrap();
    let r = run(
        &e,
        &spec,
        sh("hostname evil >/dev/null 2>&1; echo rc=$?; hostname; \
            mount -t tmpfs none /mnt 2>/dev/null; echo rc=$?; \
            unshare -U true 2>/dev/null; echo rc=$?; \
            python3 -c 'import ctypes,os; l=ctypes.CDLL(None,use_errno=True); \
            fd=os.open(\"/dev/null\",os.O_RDONLY); \
            print(\"finit_module\", l.syscall(313,fd,b\"\",0), ctypes.get_errno())'"),
    )
    .await;
    let o = out(&r);
    let lines: Vec<&str> = o.lines().collect();
    assert_eq!(lines.len(), 5, "{o}");
    assert_ne!(lines[0], "rc=0", "{o}");
    assert_eq!(lines[1], id.as_str(), "{o}");
    assert_ne!(lines[2], "rc=0", "{o}");
    assert_ne!(lines[3], "rc=0", "{o}");
    assert_eq!(lines[4], format!("finit_module -1 {}", libc::EPERM), "{o}");
    assert_eq!(nix::unistd::gethostname().unwrap(), host_name);
    // The masked host secrets stay masked.
    let r = run(&e, &spec, sh("cat /etc/shadow 2>&1")).await;
    assert!(out(&r).contains("No such file"), "{}", out(&r));

    e.be.session_kill(id, &s.id, Default::default())
        .await
        .unwrap();
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    e.be.destroy(&other.id, &other.dir).await.unwrap();
    e.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_works_normally_in_its_user_namespace() {
    let e = env("usernsuse");
    let inputs = e.tmp.path().join("inputs");
    std::fs::create_dir_all(&inputs).unwrap();
    std::fs::write(inputs.join("data.txt"), b"input data\n").unwrap();
    std::fs::write(inputs.join("private.txt"), b"private input\n").unwrap();
    std::fs::set_permissions(
        inputs.join("private.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let m = Manifest {
        mounts: vec![Mount {
            source: inputs.to_string_lossy().into_owned(),
            target: "/input".into(),
        }],
        ..Manifest::default()
    };
    let spec = e.spec(m);
    e.be.create(&spec).await.unwrap();
    let id = &spec.id;
    let host = map_of(init_pid(&spec), "uid_map").0;

    // pip-style install into the host-owned /usr/local of the lower layer.
    let files: [(&str, &str); 2] = [
        (
            "/root/demo/pyproject.toml",
            "[build-system]\nrequires = [\"setuptools\"]\nbuild-backend = \"setuptools.build_meta\"\n\
             [project]\nname = \"stasisdemo\"\nversion = \"1.0\"\n\
             [tool.setuptools]\npy-modules = [\"stasisdemo\"]\n",
        ),
        ("/root/demo/stasisdemo.py", "VALUE = 42\n"),
    ];
    for (p, c) in files {
        e.be.write_file(id, p, c.as_bytes(), None).await.unwrap();
    }
    let mut r = sh(
        "cd /root/demo && python3 -m pip install --no-index --no-build-isolation \
         --break-system-packages --no-cache-dir -q . >/tmp/pip.log 2>&1 || cat /tmp/pip.log; \
         cd / && python3 -c 'import stasisdemo; print(stasisdemo.VALUE, stasisdemo.__file__)'",
    );
    r.timeout_ms = 300_000;
    let r = run(&e, &spec, r).await;
    let o = out(&r);
    assert!(o.starts_with("42 /usr/local/lib/python3"), "{o} {r:?}");
    let installed = o.split_whitespace().nth(1).unwrap().to_string();

    // Ownership: files made by root inside, by a user inside and by the
    // file API are owned by root / the user inside, by the sandbox's host
    // ids seen from the host, and by inside ids on disk (upper layer).
    e.be.write_file(id, "api.txt", b"from api\n", None)
        .await
        .unwrap();
    let r = run(
        &e,
        &spec,
        sh(
            "set -e; stat -c '%u %g' api.txt; echo more >> api.txt; chmod 600 api.txt; \
            chown 1000:1000 api.txt; echo root > root.txt; \
            setpriv --reuid 1000 --regid 1000 --clear-groups sh -c 'id -u; echo u > /tmp/u.txt'; \
            stat -c '%u %g' /tmp/u.txt",
        ),
    )
    .await;
    assert_eq!(out(&r), "0 0\n1000\n1000 1000\n", "{r:?}");
    let wd = spec.manifest.workdir.trim_start_matches('/').to_string();
    let view = format!("/proc/{}/root", init_pid(&spec));
    // (on the sandbox's quota filesystem when it has a disk limit)
    let upper = [spec.dir.join("layer/upper"), spec.dir.join("upper")]
        .into_iter()
        .find(|p| p.is_dir())
        .unwrap();
    for (p, inside) in [
        (format!("{wd}/api.txt"), 1000),
        (format!("{wd}/root.txt"), 0),
        ("tmp/u.txt".to_string(), 1000),
        (installed.trim_start_matches('/').to_string(), 0),
    ] {
        let v = std::fs::metadata(Path::new(&view).join(&p)).unwrap();
        assert_eq!((v.uid(), v.gid()), (host + inside, host + inside), "{p}");
        let d = std::fs::symlink_metadata(upper.join(&p)).unwrap();
        assert_eq!((d.uid(), d.gid()), (inside, inside), "{p} on disk");
    }

    // Read-only inputs stay readable (python too), and read-only.
    let r = run(
        &e,
        &spec,
        sh(
            "python3 -c 'print(open(\"/input/data.txt\").read(), end=\"\")'; \
            cat /input/private.txt; touch /input/x 2>&1",
        ),
    )
    .await;
    let o = out(&r);
    assert!(
        o.starts_with("input data\nprivate input\n") && o.contains("Read-only file system"),
        "{o}"
    );

    // Low ports and ICMP echo sockets, without CAP_NET_* over the network
    // namespace (per-namespace sysctls); raw sockets stay refused.
    let r = run(
        &e,
        &spec,
        sh("python3 -c 'import socket as s\n\
            a=s.socket(); a.bind((\"127.0.0.1\", 80)); print(\"bound\", a.getsockname()[1])\n\
            s.socket(s.AF_INET, s.SOCK_DGRAM, s.IPPROTO_ICMP); print(\"icmp\")\n\
            try: s.socket(s.AF_INET, s.SOCK_RAW, s.IPPROTO_ICMP)\n\
            except PermissionError: print(\"raw refused\")' 2>&1"),
    )
    .await;
    assert_eq!(out(&r), "bound 80\nicmp\nraw refused\n", "{r:?}");

    // A python session survives pause (frozen) and resume.
    let s =
        e.be.session_start(id, session(&["python3", "-i", "-u", "-q"]))
            .await
            .unwrap();
    e.be.session_write(id, &s.id, b"import os; x = 41; print('uid', os.getuid())\n")
        .await
        .unwrap();
    read_until(&e.be, &spec, &s.id, "uid 0").await;
    let paused = e.tmp.path().join("paused");
    e.be.pause(id, &paused, true).await.unwrap();
    e.be.resume(&spec, &paused).await.unwrap();
    e.be.session_write(id, &s.id, b"print('val', x + 1)\n")
        .await
        .unwrap();
    read_until(&e.be, &spec, &s.id, "val 42").await;
    e.be.session_kill(id, &s.id, Default::default())
        .await
        .unwrap();

    // A filesystem-only pause and resume (rebuild) keeps the mapping.
    let paused2 = e.tmp.path().join("paused2");
    e.be.pause(id, &paused2, false).await.unwrap();
    e.be.resume(&spec, &paused2).await.unwrap();
    assert_eq!(map_of(init_pid(&spec), "uid_map").0, host);

    // Restore into a sandbox with another range: same ownership inside.
    let snap = e.tmp.path().join("snap");
    e.be.snapshot(id, &snap).await.unwrap();
    let spec2 = e.spec(spec.manifest.clone());
    e.be.restore(&spec2, &snap).await.unwrap();
    let host2 = map_of(init_pid(&spec2), "uid_map").0;
    assert_ne!(host2, host);
    let r = run(
        &e,
        &spec2,
        sh(
            "stat -c '%u %g %a' api.txt root.txt /tmp/u.txt; cat api.txt; \
            echo again >> api.txt && echo writable; \
            python3 -c 'import stasisdemo; print(stasisdemo.VALUE)'",
        ),
    )
    .await;
    assert_eq!(
        out(&r),
        "1000 1000 600\n0 0 644\n1000 1000 644\nfrom api\nmore\nwritable\n42\n",
        "{r:?}"
    );
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    e.be.destroy(&spec2.id, &spec2.dir).await.unwrap();
    e.cleanup_parent();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemon_restart_keeps_each_sandboxs_range() {
    let e = env("usernsrestart");
    let spec = e.create().await;
    let id = &spec.id;
    let host = map_of(init_pid(&spec), "uid_map").0;

    // "Restart": a new backend instance knows nothing but the specs.
    let be2 = ProcessBackend::new(e.be.config().clone());
    be2.recover(&spec).await.unwrap();
    // Its file API writes with the recovered sandbox's ids.
    be2.write_file(id, "after.txt", b"x", None).await.unwrap();
    let view = format!(
        "/proc/{}/root{}/after.txt",
        init_pid(&spec),
        spec.manifest.workdir
    );
    assert_eq!(std::fs::metadata(&view).unwrap().uid(), host);
    // A new sandbox does not get the range of the recovered one.
    let spec2 = e.spec(Manifest::default());
    be2.create(&spec2).await.unwrap();
    assert_ne!(map_of(init_pid(&spec2), "uid_map").0, host);
    // A rebuild (filesystem-only pause, resume) keeps the range.
    let p = e.tmp.path().join("p");
    be2.pause(id, &p, false).await.unwrap();
    be2.resume(&spec, &p).await.unwrap();
    assert_eq!(map_of(init_pid(&spec), "uid_map").0, host);
    let r = be2
        .exec(id, sh("stat -c %u after.txt"), None)
        .await
        .unwrap();
    assert_eq!(out(&r), "0\n");
    be2.destroy(&spec.id, &spec.dir).await.unwrap();
    be2.destroy(&spec2.id, &spec2.dir).await.unwrap();
    // Destroy frees the ranges (no claim left; `.lock` is the claims lock).
    let claims = spec.dir.parent().unwrap().join(".userns");
    let left: Vec<String> = std::fs::read_dir(&claims)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != ".lock")
        .collect();
    assert!(left.is_empty(), "{left:?}");
    e.cleanup_parent();
}
