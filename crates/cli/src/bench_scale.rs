//! `stasis bench scale`: what N paused sandboxes cost one node, measured on
//! a real daemon (a child of this executable on a temporary data dir, with
//! SQLite or the PostgreSQL database `--meta` names). Creates N sandboxes
//! `--concurrency` at a time, pauses them all, then reports: create and
//! pause rates; the daemon's RSS, host processes and host RAM per paused
//! sandbox; local disk per paused sandbox (and the store's); a listing's
//! first page, a page deep in, and the unpaginated list; the reaper's last
//! pass; resume + exec; and a restart's reconcile of every record. Figures
//! are reported, never asserted. `--backend fake` runs the daemon with the
//! in-memory fake backend (`serve --bench-fake-backend`): nothing runs on
//! the host, so the control plane can be measured at 10,000.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use futures::{stream, StreamExt, TryStreamExt};
use serde_json::{json, Value};

use stasis_core::{Error, Result};

use crate::client::Client;
use crate::measure::{median, ms_since};
use crate::temp_daemon::TempDaemon;

#[derive(Args)]
pub struct ScaleArgs {
    /// fake | process | microvm
    #[arg(long, default_value = "fake")]
    backend: String,
    /// How many sandboxes.
    #[arg(short = 'n', long, default_value_t = 1000)]
    count: usize,
    /// Creates (and pauses) in flight at once.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Metadata database (`postgres://...`, a fresh database); default SQLite.
    #[arg(long)]
    meta: Option<String>,
    #[arg(long)]
    images: Option<PathBuf>,
    #[arg(long, default_value = "tcg")]
    accel: String,
    /// Samples of each latency (list pages, resume + exec).
    #[arg(long, default_value_t = 10)]
    samples: usize,
    /// The daemon's `--frozen-secs` (process backend): the paused figures
    /// are taken once every frozen sandbox has been let go (0: at the
    /// reaper's next pass); the figures right after the pause, with the
    /// processes still frozen, are reported as `paused_frozen`.
    #[arg(long, default_value_t = 0)]
    frozen_secs: u64,
    /// The daemon's `--local-pause-max-mb` (its cap on the local disk of
    /// paused sandboxes; 0 evicts each pause's local state once stored):
    /// the paused figures then show what a node keeps after eviction.
    /// Unset: the daemon's default (half the free disk).
    #[arg(long)]
    local_pause_max_mb: Option<u64>,
}

/// The host's view of a daemon and what runs under it.
struct Host {
    pid: u32,
    cgroup: Option<String>,
}

fn status_kb(pid: u32, key: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

impl Host {
    fn rss_kb(&self) -> u64 {
        status_kb(self.pid, "VmRSS:")
    }

    /// Processes (besides the daemon) in the daemon's own cgroup tree or
    /// descended from it, and their summed RSS (kB).
    fn sandbox_processes(&self) -> (u64, u64) {
        let (mut n, mut kb) = (0, 0);
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return (0, 0);
        };
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if pid == self.pid {
                continue;
            }
            let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            let mine = self.cgroup.as_deref().is_some_and(|c| cg.contains(c))
                || status_kb(pid, "PPid:") == u64::from(self.pid);
            if mine {
                n += 1;
                kb += status_kb(pid, "VmRSS:");
            }
        }
        (n, kb)
    }
}

fn mem_available_kb() -> u64 {
    let s = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Bytes a directory tree takes on disk (allocated blocks; links not followed).
fn disk_bytes(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(md) = std::fs::symlink_metadata(p) else {
        return 0;
    };
    let mut n = md.blocks() * 512;
    if md.is_dir() {
        for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
            n += disk_bytes(&e.path());
        }
    }
    n
}

async fn start(a: &ScaleArgs, dir: &Path) -> Result<(TempDaemon, Host, f64)> {
    let images = a.images.clone().unwrap_or_else(crate::demo::default_images);
    let img = images.display().to_string();
    let frozen = a.frozen_secs.to_string();
    let cap = a.local_pause_max_mb.map(|m| m.to_string());
    let mut extra = vec![
        "--frozen-secs",
        &frozen,
        "--images",
        &img,
        "--accel",
        &a.accel,
        "--standby-secs",
        "0",
        "--rate-limit-per-sec",
        "0",
    ];
    if a.backend == "fake" {
        extra.push("--bench-fake-backend");
    }
    if let Some(cap) = &cap {
        extra.extend(["--local-pause-max-mb", cap.as_str()]);
    }
    if let Some(m) = &a.meta {
        extra.extend(["--meta", m.as_str(), "--node-id", "bench"]);
    }
    let t0 = Instant::now();
    let d = TempDaemon::start(&extra, Some(dir.to_path_buf())).await?;
    let ready_ms = ms_since(t0);
    let doctor = d.client.get("/v1/doctor").await?;
    let host = Host {
        pid: d.child.id(),
        cgroup: doctor["cgroup"].as_str().map(String::from),
    };
    Ok((d, host, ready_ms))
}

/// Run `f` over `ids`, `n` at a time; the rate per second.
async fn each<F, Fut>(ids: &[String], n: usize, f: F) -> Result<f64>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let t0 = Instant::now();
    stream::iter(ids.iter().cloned().map(&f))
        .buffer_unordered(n.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    Ok(ids.len() as f64 / t0.elapsed().as_secs_f64().max(1e-9))
}

/// Median ms of `n` runs of `f`.
async fn timed<F, Fut>(n: usize, mut f: F) -> Result<f64>
where
    F: FnMut(usize) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let mut v = Vec::new();
    for i in 0..n.max(1) {
        let t = Instant::now();
        f(i).await?;
        v.push(ms_since(t));
    }
    Ok(median(&mut v))
}

async fn metric(c: &Client, name: &str) -> Option<f64> {
    let url = format!("{}/metrics", c.base().trim_end_matches('/'));
    let text = reqwest::get(url).await.ok()?.text().await.ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

fn per(total: f64, n: usize) -> f64 {
    (total / n.max(1) as f64 * 10.0).round() / 10.0
}

pub async fn scale(a: ScaleArgs) -> Result<Value> {
    let kind = match a.backend.as_str() {
        "fake" | "process" => "process",
        "microvm" => "microvm",
        other => {
            return Err(Error::invalid(format!(
                "--backend {other}: fake, process or microvm"
            )))
        }
    };
    if a.count == 0 {
        return Err(Error::invalid("-n must be at least 1"));
    }
    let tmp = tempfile::Builder::new().prefix("stasis-scale-").tempdir()?;
    let dir = tmp.path().to_path_buf();
    let (d, host, _) = start(&a, &dir).await?;
    let c = d.client.clone();
    let rss0 = host.rss_kb();
    let (procs0, _) = host.sandbox_processes();
    let avail0 = mem_available_kb();
    let disk0 = disk_bytes(&dir.join("sandboxes"));

    let manifest = json!({"backend": kind, "lifecycle": {"on_idle": "nothing"}});
    let ids = std::sync::Mutex::new(Vec::new());
    let t0 = Instant::now();
    stream::iter(0..a.count)
        .map(|_| {
            let (c, m) = (c.clone(), manifest.clone());
            async move { c.create(m).await }
        })
        .buffer_unordered(a.concurrency.max(1))
        .try_for_each(|sb| {
            ids.lock().expect("ids").push(sb.id.clone());
            async { Ok(()) }
        })
        .await?;
    let create_rate = a.count as f64 / t0.elapsed().as_secs_f64();
    let ids = ids.into_inner().expect("ids");
    let (procs_running, kb_running) = host.sandbox_processes();
    let pause_rate = each(&ids, a.concurrency, |id| {
        let c = c.clone();
        async move {
            c.post(&format!("/v1/sandboxes/{id}/pause"), json!({}))
                .await
                .map(|_| ())
        }
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (procs_frozen, kb_frozen) = host.sandbox_processes();
    // Until the node holds no frozen sandbox any more (the window ends and
    // the reaper lets them go), within the window and a minute.
    let held_deadline = Instant::now() + Duration::from_secs(a.frozen_secs + 60);
    let mut held = metric(&c, "stasis_standby{what=\"sandboxes\"}").await;
    while held.is_some_and(|h| h > 0.0) && Instant::now() < held_deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        held = metric(&c, "stasis_standby{what=\"sandboxes\"}").await;
    }
    let rss = host.rss_kb();
    let (procs, kb) = host.sandbox_processes();
    let avail = mem_available_kb();
    let disk = disk_bytes(&dir.join("sandboxes")).saturating_sub(disk0);
    let store = disk_bytes(&dir.join("store"));

    let page = a.count.min(100);
    let first_page = timed(a.samples, |_| {
        let c = c.clone();
        async move {
            c.get(&format!("/v1/sandboxes?limit={page}"))
                .await
                .map(|_| ())
        }
    })
    .await?;
    // A page deep in: the cursor of the middle sandbox.
    let mid = c
        .get(&format!("/v1/sandboxes/{}", ids[ids.len() / 2]))
        .await?;
    let cursor = format!("{}:{}", mid["created_at_ms"], ids[ids.len() / 2]);
    let deep_page = timed(a.samples, |_| {
        let (c, cursor) = (c.clone(), cursor.clone());
        async move {
            c.get(&format!("/v1/sandboxes?limit={page}&cursor={cursor}"))
                .await
                .map(|_| ())
        }
    })
    .await?;
    let full_list = timed(a.samples.min(3), |_| {
        let c = c.clone();
        async move { c.get("/v1/sandboxes").await.map(|_| ()) }
    })
    .await?;
    let reaper_ms = metric(&c, "stasis_reaper_pass_seconds")
        .await
        .map(|s| s * 1000.0);
    let examined = metric(&c, "stasis_reaper_examined_total").await;

    // A restart: SIGTERM (no drain: measured separately), then a new
    // daemon reconciles every record before it serves.
    drop(d);
    let (d, host2, restart_ms) = start(&a, &dir).await?;
    let c = d.client.clone();
    let doctor = c.get("/v1/doctor").await?;
    let rss_restarted = host2.rss_kb();
    let sample: Vec<String> = ids.iter().take(a.samples.max(1)).cloned().collect();
    let resume_exec = timed(sample.len(), |i| {
        let (c, id) = (c.clone(), sample[i].clone());
        async move {
            crate::measure::exec_ok(&c, &id, &["echo", "ok"])
                .await
                .map(|_| ())
        }
    })
    .await?;
    let destroy_rate = each(&ids, a.concurrency, |id| {
        let c = c.clone();
        async move { c.delete(&format!("/v1/sandboxes/{id}")).await.map(|_| ()) }
    })
    .await?;
    drop(d);
    crate::temp_daemon::destroy_owned(&dir);
    drop(tmp);

    let n = a.count;
    Ok(json!({
        "backend": a.backend,
        "meta": if a.meta.is_some() { "postgres" } else { "sqlite" },
        "n": n,
        "create_per_sec": (create_rate * 10.0).round() / 10.0,
        "pause_per_sec": (pause_rate * 10.0).round() / 10.0,
        "destroy_per_sec": (destroy_rate * 10.0).round() / 10.0,
        "paused": {
            "daemon_rss_kb_per_sandbox": per(rss.saturating_sub(rss0) as f64, n),
            "daemon_rss_mb": rss / 1024,
            "host_processes_per_sandbox": per(procs.saturating_sub(procs0) as f64, n),
            "host_processes_rss_kb_per_sandbox": per(kb as f64, n),
            "host_ram_kb_per_sandbox_memavailable": per(avail0.saturating_sub(avail) as f64, n),
            "local_disk_kb_per_sandbox": per(disk as f64 / 1024.0, n),
            "store_kb_per_sandbox": per(store as f64 / 1024.0, n),
        },
        "frozen_secs": a.frozen_secs,
        "local_pause_max_mb": a.local_pause_max_mb,
        "still_held_at_measure": held,
        "paused_frozen": {
            "host_processes_per_sandbox": per(procs_frozen.saturating_sub(procs0) as f64, n),
            "host_processes_rss_kb_per_sandbox": per(kb_frozen as f64, n),
        },
        "running": {
            "host_processes_per_sandbox": per(procs_running.saturating_sub(procs0) as f64, n),
            "host_processes_rss_kb_per_sandbox": per(kb_running as f64, n),
        },
        "list_ms": {
            "first_page": first_page,
            "deep_page": deep_page,
            "page_size": page,
            "unpaginated": full_list,
        },
        "reaper": {"last_pass_ms": reaper_ms, "examined_total": examined},
        "restart": {
            "ready_ms": restart_ms.round(),
            "reconcile": doctor["reconcile"],
            "daemon_rss_mb": rss_restarted / 1024,
        },
        "resume_exec_ms": resume_exec,
    }))
}
