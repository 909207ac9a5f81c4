//! Fork-N memory measurement (not part of the normal suite: 16 TCG guests).
//!
//!   STASIS_IMAGE_DIR=... [STASIS_FORK_N=16] [STASIS_SHARED_RAM=1] \
//!     cargo test -p stasis-backend-microvm --test fork_bench -- --ignored --nocapture
//!
//! Prints, for one sandbox and for N forks of its snapshot: RSS, PSS and
//! anonymous RSS of the QEMU processes, and restore timings.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use stasis_backend::{Backend, SandboxSpec};
use stasis_backend_microvm::{util, AccelChoice, MicrovmBackend, MicrovmConfig};
use stasis_core::{Manifest, SandboxId};

#[path = "support/vm_util.rs"]
mod vm_util;

fn kb(pid: i32, file: &str, key: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/{file}"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

#[derive(Debug, Default, Clone, Copy)]
struct Mem {
    rss: u64,
    pss: u64,
    anon: u64,
}

fn mem(pid: i32) -> Mem {
    Mem {
        rss: kb(pid, "status", "VmRSS:") >> 10,
        pss: kb(pid, "smaps_rollup", "Pss:") >> 10,
        anon: kb(pid, "status", "RssAnon:") >> 10,
    }
}

async fn run(b: &MicrovmBackend, id: &SandboxId, cmd: &str) -> String {
    let r = vm_util::sh_ok(b, id, cmd, 60_000).await;
    String::from_utf8_lossy(&r.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn fork_n_memory() {
    let Some(img) = std::env::var_os("STASIS_IMAGE_DIR").map(PathBuf::from) else {
        eprintln!("STASIS_IMAGE_DIR not set: fork bench NOT RUN");
        return;
    };
    let n: usize = std::env::var("STASIS_FORK_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16);
    let shared = std::env::var("STASIS_SHARED_RAM")
        .map(|v| v != "0")
        .unwrap_or(true);
    let mut c = MicrovmConfig::new(img.parent().unwrap());
    c.accel = AccelChoice::Tcg;
    c.shared_ram = shared;
    if let Some(mb) = std::env::var("STASIS_TB_MB")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        c.tcg_tb_mb = Some(mb);
    }
    c.tcg_tb_mb_restore = std::env::var("STASIS_TB_MB_RESTORE")
        .ok()
        .and_then(|s| s.parse().ok())
        .or(c.tcg_tb_mb_restore);
    c.boot_timeout = Duration::from_secs(180);
    let b = MicrovmBackend::new(c);
    let root = tempfile::tempdir().unwrap();
    let mk = || {
        let id = SandboxId::generate();
        let dir = root.path().join(id.as_str());
        std::fs::create_dir_all(&dir).unwrap();
        SandboxSpec {
            id,
            manifest: Manifest {
                image: Some(img.display().to_string()),
                ..Default::default()
            },
            dir,
        }
    };
    let src = mk();
    b.create(&src).await.unwrap();
    // Some state worth sharing: python with a loaded module set and 30 MB of data.
    run(&b, &src.id, "python3 -c 'import json, decimal, sqlite3' && head -c 30000000 /dev/urandom > /tmp/data && echo ok").await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let one = mem(b.qemu_pid(&src.id).unwrap());
    eprintln!("FIGURE shared_ram={shared} one sandbox: {one:?} MiB");
    let snap = root.path().join("snap");
    std::fs::create_dir(&snap).unwrap();
    let t = Instant::now();
    let arts = b.snapshot(&src.id, &snap).await.unwrap();
    eprintln!(
        "FIGURE snapshot {} ms: {:?}",
        t.elapsed().as_millis(),
        arts.iter().map(|a| (&a.name, a.size)).collect::<Vec<_>>()
    );
    b.destroy(&src.id, &src.dir).await.unwrap();
    let mut kids = Vec::new();
    let t = Instant::now();
    for _ in 0..n {
        let k = mk();
        b.restore(&k, &snap).await.unwrap();
        eprintln!("restore {:?}", b.timings(&k.id));
        kids.push(k);
    }
    let restore_ms = t.elapsed().as_millis();
    for k in &kids {
        assert_eq!(run(&b, &k.id, "wc -c < /tmp/data").await.trim(), "30000000");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut total = Mem::default();
    for k in &kids {
        let m = mem(b.qemu_pid(&k.id).unwrap());
        total.rss += m.rss;
        total.pss += m.pss;
        total.anon += m.anon;
    }
    eprintln!(
        "FIGURE shared_ram={shared} fork {n}: restore total {restore_ms} ms; sum over forks {total:?} MiB; \
         ratio vs one sandbox: rss {:.2} pss {:.2}",
        total.rss as f64 / one.rss as f64,
        total.pss as f64 / one.rss as f64
    );
    // Where a fork's private memory is: the largest anonymous/private mappings.
    let pid = b.qemu_pid(&kids[0].id).unwrap();
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let mut maps: Vec<(u64, String)> = Vec::new();
    let mut cur = String::new();
    for l in smaps.lines() {
        if l.contains('-') && !l.contains(':')
            || l.split_whitespace().count() >= 5
                && l.chars().next().is_some_and(|c| c.is_ascii_hexdigit())
                && !l.ends_with("kB")
        {
            cur = l.to_string();
        } else if let Some(v) = l.strip_prefix("Private_Dirty:") {
            let kb: u64 = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
            maps.push((kb, cur.clone()));
        }
    }
    maps.sort_by_key(|m| std::cmp::Reverse(m.0));
    for (kb, m) in maps.iter().take(6) {
        eprintln!("fork private_dirty {kb} kB: {m}");
    }
    for k in &kids {
        b.destroy(&k.id, &k.dir).await.unwrap();
        let _ = util::pid_alive(0);
    }
}
