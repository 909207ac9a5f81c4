//! The manifest's boundaries, enforced by the process backend: read-only
//! input mounts, output collection, the disk quota of the writable layer and
//! the egress allowlist. Each test tries to cross its boundary.
mod common;
#[path = "common/netfix.rs"]
mod netfix;
use common::*;

use std::sync::Arc;

use stasis_backend::{Backend, Egress};
use stasis_core::manifest::Mount;
use stasis_core::Manifest;

fn input_dir(e: &Env) -> std::path::PathBuf {
    let d = e.tmp.path().join("inputs");
    std::fs::create_dir_all(d.join("sub")).unwrap();
    std::fs::write(d.join("data.txt"), b"input data\n").unwrap();
    std::fs::write(d.join("sub/deep.txt"), b"deep\n").unwrap();
    std::fs::write(e.tmp.path().join("single.txt"), b"one file\n").unwrap();
    std::fs::write(e.tmp.path().join("secret.txt"), b"host secret\n").unwrap();
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn input_mounts_are_read_only_and_stay_out_of_the_layer() {
    let e = env("mounts");
    let inputs = input_dir(&e);
    let m = Manifest {
        mounts: vec![
            Mount {
                source: inputs.to_string_lossy().into_owned(),
                target: "/input".into(),
            },
            Mount {
                source: e
                    .tmp
                    .path()
                    .join("single.txt")
                    .to_string_lossy()
                    .into_owned(),
                target: "/etc/single.txt".into(),
            },
        ],
        ..Manifest::default()
    };
    let spec = e.spec(m);
    e.be.create(&spec).await.unwrap();

    let r = run(
        &e,
        &spec,
        sh("cat /input/data.txt /input/sub/deep.txt /etc/single.txt"),
    )
    .await;
    assert_eq!(out(&r), "input data\ndeep\none file\n", "{r:?}");

    // Writes: EROFS for new files, existing files, deletes, renames, chmod.
    for cmd in [
        "echo x > /input/new.txt",
        "echo x >> /input/data.txt",
        "rm /input/data.txt",
        "mv /input/sub /input/sub2",
        "chmod 777 /input/data.txt",
        "echo x > /etc/single.txt",
        "mkdir /input/d",
    ] {
        let r = run(&e, &spec, sh(&format!("{{ {cmd}; }} 2>&1"))).await;
        assert_ne!(r.exit_code, Some(0), "{cmd}: {r:?}");
        assert!(
            out(&r).contains("Read-only file system"),
            "{cmd}: {}",
            out(&r)
        );
    }
    // Remounting read-write is refused (seccomp + no CAP_SYS_ADMIN).
    let r = run(
        &e,
        &spec,
        sh("mount -o remount,rw /input 2>&1; echo x > /input/n 2>&1"),
    )
    .await;
    assert!(!inputs.join("n").exists(), "{}", out(&r));
    // `..` and symlinks out of the mount lead into the sandbox, not the host.
    let r = run(
        &e,
        &spec,
        sh("cat /input/../secret.txt 2>&1; ls /input/.. | grep -c secret"),
    )
    .await;
    assert!(!out(&r).contains("host secret"), "{}", out(&r));
    assert_eq!(
        std::fs::read(inputs.join("data.txt")).unwrap(),
        b"input data\n"
    );

    // The writable layer holds the mount points only, never the content.
    let snap = e.tmp.path().join("snap");
    e.be.snapshot(&spec.id, &snap).await.unwrap();
    let tar = std::fs::read(snap.join("fs.tar")).unwrap();
    let text = String::from_utf8_lossy(&tar);
    assert!(
        !text.contains("input data"),
        "mount content leaked into the layer"
    );
    assert!(
        !text.contains("one file"),
        "file mount content leaked into the layer"
    );

    // A rebuild (resume after a filesystem-only pause) mounts them again.
    let paused = e.tmp.path().join("paused");
    e.be.pause(&spec.id, &paused, false).await.unwrap();
    e.be.resume(&spec, &paused).await.unwrap();
    let r = run(
        &e,
        &spec,
        sh("cat /input/sub/deep.txt; touch /input/x 2>&1"),
    )
    .await;
    assert!(out(&r).starts_with("deep\n"), "{}", out(&r));
    assert!(out(&r).contains("Read-only file system"), "{}", out(&r));
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mount_target_symlink_cannot_reach_the_host() {
    let e = env("mounttgt");
    let inputs = input_dir(&e);
    // The sandbox plants a symlink where the mount target will be and is
    // rebuilt with the mount: the target resolves inside the sandbox root.
    let outside = e.tmp.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    let spec = e.spec(Manifest::default());
    e.be.create(&spec).await.unwrap();
    run(
        &e,
        &spec,
        sh(&format!("ln -s {} /workspace/in", outside.display())),
    )
    .await;
    let paused = e.tmp.path().join("p");
    e.be.pause(&spec.id, &paused, false).await.unwrap();
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    let mut spec2 = spec.clone();
    spec2.manifest.mounts = vec![Mount {
        source: inputs.to_string_lossy().into_owned(),
        target: "/workspace/in/x".into(),
    }];
    // The symlink dangles inside the sandbox root. It is resolved inside the
    // root, as every sandbox path is: its target is made there (as `mkdir -p`
    // through a link to a missing directory does), so the mount lands where
    // the link leads inside the sandbox and never on the host path it names.
    e.be.resume(&spec2, &paused).await.unwrap();
    assert!(
        std::fs::read_dir(&outside).unwrap().next().is_none(),
        "the mount point was created on the host"
    );
    let r = run(&e, &spec2, sh("cat /workspace/in/x/data.txt")).await;
    assert_eq!(
        out(&r),
        "input data\n",
        "the mount is reached through the link"
    );
    e.be.destroy(&spec2.id, &spec2.dir).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disk_fill_hits_enospc_inside_the_sandbox_only() {
    let e = env("diskfill");
    let mut m = Manifest::default();
    m.resources.disk_mb = 32;
    let spec = e.spec(m);
    let t = std::time::Instant::now();
    e.be.create(&spec).await.unwrap();
    eprintln!(
        "create with a 32 MiB quota filesystem: {} ms",
        t.elapsed().as_millis()
    );
    let r = run(&e, &spec, sh("df -m / | tail -1")).await;
    eprintln!("df inside: {}", out(&r));
    let r = run(
        &e,
        &spec,
        sh("dd if=/dev/zero of=/workspace/fill bs=1M count=64 2>&1; echo rc=$?"),
    )
    .await;
    let o = out(&r);
    assert!(o.contains("No space left on device"), "{o}");
    assert!(!o.contains("rc=0"), "{o}");
    // The host file holding the layer stays within the quota.
    use std::os::unix::fs::MetadataExt;
    let img = std::fs::metadata(stasis_backend_process::disk::image(&spec.dir)).unwrap();
    assert!(
        img.blocks() * 512 <= 33 << 20,
        "image uses {} bytes",
        img.blocks() * 512
    );
    // Freeing space works again, and the layer survives a snapshot/restore.
    let r = run(
        &e,
        &spec,
        sh("rm /workspace/fill && echo ok > /workspace/after && cat /workspace/after"),
    )
    .await;
    assert_eq!(out(&r), "ok\n");
    let snap = e.tmp.path().join("snap");
    e.be.snapshot(&spec.id, &snap).await.unwrap();
    let spec2 = e.spec(spec.manifest.clone());
    e.be.restore(&spec2, &snap).await.unwrap();
    assert_eq!(
        out(&run(&e, &spec2, sh("cat /workspace/after")).await),
        "ok\n"
    );
    // Pause/resume (freezer) keeps it mounted; destroy unmounts it.
    let p = e.tmp.path().join("p");
    e.be.pause(&spec.id, &p, true).await.unwrap();
    e.be.resume(&spec, &p).await.unwrap();
    assert_eq!(
        out(&run(&e, &spec, sh("cat /workspace/after")).await),
        "ok\n"
    );
    for s in [&spec, &spec2] {
        e.be.destroy(&s.id, &s.dir).await.unwrap();
        assert!(!stasis_backend_process::disk::is_mounted(
            &stasis_backend_process::disk::mount_point(&s.dir)
        ));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphaned_quota_mounts_are_cleaned() {
    let sandboxes = tempfile::tempdir().unwrap();
    let e = env_with("diskorphan", |c| {
        c.state_dir = Some(sandboxes.path().join("sandboxes"));
    });
    let _ = &e;
    let mut m = Manifest::default();
    m.resources.disk_mb = 16;
    let id = stasis_core::SandboxId::generate();
    let dir = sandboxes.path().join("sandboxes").join(id.as_str());
    std::fs::create_dir_all(&dir).unwrap();
    let spec = stasis_backend::SandboxSpec {
        id,
        manifest: m,
        dir,
    };
    e.be.create(&spec).await.unwrap();
    let mp = stasis_backend_process::disk::mount_point(&spec.dir);
    assert!(stasis_backend_process::disk::is_mounted(&mp));
    e.be.cleanup_orphans(&[]).await.unwrap();
    assert!(!stasis_backend_process::disk::is_mounted(&mp));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn egress_attaches_with_the_sandbox_and_leaves_the_host_alone() {
    let svc = Arc::new(stasis_net::EgressService::new(Default::default()).unwrap());
    let eg = svc.clone();
    let e = env_with("netattach", move |c| c.egress = Some(eg as Arc<dyn Egress>));
    let links_before = host_links();
    let mut m = Manifest::default();
    m.network.allow = vec!["127.0.0.1:9".into()];
    let spec = e.spec(m);
    e.be.create(&spec).await.unwrap();
    assert!(svc.is_attached(&spec.id));
    // Nothing was added to the host's network.
    let added: Vec<String> = host_links()
        .into_iter()
        .filter(|l| !links_before.contains(l))
        .filter(|l| l.starts_with("egress") || (l.starts_with("stx") && !l.starts_with("stxt")))
        .collect();
    assert!(added.is_empty(), "{added:?}");
    // A pause that keeps memory keeps the attachment; one that does not
    // ends it, and the resume attaches again.
    let p = e.tmp.path().join("p");
    e.be.pause(&spec.id, &p, false).await.unwrap();
    assert!(!svc.is_attached(&spec.id));
    e.be.resume(&spec, &p).await.unwrap();
    assert!(svc.is_attached(&spec.id));
    // A restarted daemon (a new backend and service) attaches what it
    // reattaches.
    let svc2 = Arc::new(stasis_net::EgressService::new(Default::default()).unwrap());
    let mut cfg2 = e.be.config().clone();
    cfg2.egress = Some(svc2.clone() as Arc<dyn Egress>);
    let be2 = stasis_backend_process::ProcessBackend::new(cfg2);
    be2.recover(&spec).await.unwrap();
    assert!(svc2.is_attached(&spec.id));
    be2.destroy(&spec.id, &spec.dir).await.unwrap();
    assert!(!svc2.is_attached(&spec.id));
    // Without an egress service, a manifest that allows anything is refused.
    let e3 = env_with("netnone", |c| c.egress = None);
    let mut m = Manifest::default();
    m.network.allow = vec!["a.test".into()];
    let err = e3.be.create(&e3.spec(m)).await.unwrap_err();
    assert_eq!(err.field.as_deref(), Some("network.allow"), "{err}");
}

fn host_links() -> Vec<String> {
    std::fs::read_dir("/sys/class/net")
        .unwrap()
        .flatten()
        .map(|d| d.file_name().to_string_lossy().into_owned())
        .collect()
}

async fn has_default_route(e: &Env, spec: &stasis_backend::SandboxSpec) -> bool {
    out(&run(e, spec, sh("ip route show default")).await).starts_with("default")
}

async fn probe(e: &Env, spec: &stasis_backend::SandboxSpec, checks: &[String]) -> String {
    let mut argv = vec![
        "/usr/bin/python3".to_string(),
        "-c".into(),
        netfix::PROBE.into(),
    ];
    argv.extend(checks.iter().cloned());
    let mut r = common::req(&[]);
    r.argv = argv;
    let res = run(e, spec, r).await;
    String::from_utf8_lossy(&res.stdout).into_owned() + &String::from_utf8_lossy(&res.stderr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn egress_allowlist_admits_only_listed_tcp() {
    let e = env("egress");
    let fx = netfix::NetFixture::new("be-egress");
    // Controls: from the host, UDP and ICMP to the namespace work.
    let control = netfix::probe_results(&fx.probe_on_host(&[
        format!("udp:{}:{}", fx.ns_ip, fx.ns_udp),
        format!("icmp:{}", fx.ns_ip),
        format!("tcp:{}:{}", fx.ns_ip, fx.ns_tcp_denied),
    ]));
    assert!(control.values().all(|(ok, _)| *ok), "{control:?}");

    let mut m = Manifest::default();
    m.network.allow = fx.allow();
    let spec = e.spec(m);
    e.be.create(&spec).await.unwrap();
    assert!(
        has_default_route(&e, &spec).await,
        "sandbox has no default route"
    );
    let gw = None;

    let check = |spec: stasis_backend::SandboxSpec| {
        let (e, fx) = (&e, &fx);
        async move {
            let denied = fx.denied_checks(gw);
            let mut all = fx.allowed_checks();
            all.extend(denied.iter().map(|(c, _)| c.clone()));
            let o = probe(e, &spec, &all).await;
            let res = netfix::probe_results(&o);
            for c in fx.allowed_checks() {
                let (ok, why) = res.get(&c).unwrap_or_else(|| panic!("{c} missing: {o}"));
                assert!(*ok, "{c} should connect: {why}");
            }
            for (c, what) in &denied {
                let (ok, why) = res.get(c).unwrap_or_else(|| panic!("{c} missing: {o}"));
                assert!(!*ok, "{what} ({c}) was not denied: {why}");
                eprintln!("denied: {what} ({c}: {why})");
            }
        }
    };
    check(spec.clone()).await;

    // Freeze/thaw keeps the namespace and rules.
    let p = e.tmp.path().join("p");
    e.be.pause(&spec.id, &p, true).await.unwrap();
    e.be.resume(&spec, &p).await.unwrap();
    check(spec.clone()).await;
    // A restored sandbox is attached on its own.
    let snap = e.tmp.path().join("snap");
    e.be.snapshot(&spec.id, &snap).await.unwrap();
    let spec2 = e.spec(spec.manifest.clone());
    e.be.restore(&spec2, &snap).await.unwrap();
    check(spec2.clone()).await;

    // Without an allowlist nothing leaves, not even to what others may reach.
    let plain = e.spec(Manifest::default());
    e.be.create(&plain).await.unwrap();
    let o = probe(&e, &plain, &fx.allowed_checks()).await;
    for (c, (ok, why)) in netfix::probe_results(&o) {
        assert!(!ok, "{c} reached without an allowlist: {why}");
    }

    for s in [&spec, &spec2, &plain] {
        e.be.destroy(&s.id, &s.dir).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outputs_are_collected_without_following_links_even_when_paused() {
    let e = env("outputs");
    std::fs::write(e.tmp.path().join("hostfile"), b"host only\n").unwrap();
    let m = Manifest {
        outputs: vec!["/workspace/out".into(), "/results".into()],
        ..Manifest::default()
    };
    let spec = e.spec(m);
    e.be.create(&spec).await.unwrap();
    // Output dirs exist from the start.
    let r = run(
        &e,
        &spec,
        sh("test -d /workspace/out && test -d /results && echo yes"),
    )
    .await;
    assert_eq!(out(&r), "yes\n");
    run(
        &e,
        &spec,
        sh(&format!(
            "mkdir -p /workspace/out/sub && echo result > /workspace/out/sub/r.txt && \
             echo top > /results/top.txt && echo private > /workspace/private.txt && \
             ln -s /etc/passwd /workspace/out/passwd && ln -s ../private.txt /workspace/out/up && \
             ln -s {} /workspace/out/host && ln -s / /workspace/out/root && mkfifo /workspace/out/fifo",
            e.tmp.path().join("hostfile").display()
        )),
    )
    .await;
    let p = e.tmp.path().join("p");
    e.be.pause(&spec.id, &p, true).await.unwrap();
    let tarp = e.tmp.path().join("outputs.tar");
    e.be.collect_outputs(&spec.id, &tarp).await.unwrap();
    let mut a = tar::Archive::new(std::fs::File::open(&tarp).unwrap());
    let mut seen = std::collections::BTreeMap::new();
    for ent in a.entries().unwrap() {
        let mut ent = ent.unwrap();
        let path = ent.path().unwrap().to_string_lossy().into_owned();
        let kind = ent.header().entry_type();
        let mut body = String::new();
        std::io::Read::read_to_string(&mut ent, &mut body).unwrap();
        let link = ent
            .link_name()
            .unwrap()
            .map(|l| l.to_string_lossy().into_owned());
        seen.insert(path, (kind, body, link));
    }
    assert_eq!(seen["workspace/out/sub/r.txt"].1, "result\n");
    assert_eq!(seen["results/top.txt"].1, "top\n");
    for l in [
        "workspace/out/passwd",
        "workspace/out/up",
        "workspace/out/host",
        "workspace/out/root",
    ] {
        assert_eq!(seen[l].0, tar::EntryType::Symlink, "{l}");
        assert_eq!(seen[l].1, "", "{l} was followed");
    }
    assert!(!seen.contains_key("workspace/out/fifo"));
    assert!(!seen.keys().any(|k| k.contains("private.txt")), "{seen:?}");
    let all: String = seen.values().map(|v| v.1.clone()).collect();
    assert!(!all.contains("root:x:0") && !all.contains("host only"));
    e.be.resume(&spec, &p).await.unwrap();
    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
}

/// Create-time cost of the disk quota (median of 8 creates each, with and
/// without a 1 GiB quota filesystem); run with `--ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn bench_disk_quota_create_cost() {
    let e = env("diskbench");
    let mut med = Vec::new();
    for disk_mb in [0u64, 1024] {
        let mut v = Vec::new();
        for _ in 0..8 {
            let mut m = Manifest::default();
            m.resources.disk_mb = disk_mb;
            let spec = e.spec(m);
            let t = std::time::Instant::now();
            e.be.create(&spec).await.unwrap();
            v.push(t.elapsed().as_secs_f64() * 1000.0);
            e.be.destroy(&spec.id, &spec.dir).await.unwrap();
        }
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        med.push((disk_mb, (v[3] + v[4]) / 2.0));
    }
    for (d, m) in &med {
        println!("create, disk_mb={d}: median {m:.1} ms");
    }
}
