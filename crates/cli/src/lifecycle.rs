//! `stasis bench lifecycle`: create, first exec, pause, resume, snapshot,
//! restore and fork timings and sizes on a temporary daemon, with the cost
//! section they price; `stasis cost` measures through it too.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::{json, Value};

use stasis_core::Result;
use stasis_cost::{compare, Measured, Prices, Profile};

use crate::client::Client;
use crate::measure::{exec_ok, median, ms_since, start_daemon};

#[derive(Args)]
pub struct LifecycleArgs {
    #[arg(long, default_value = "process")]
    backend: String,
    #[arg(long, default_value_t = 5)]
    repeats: usize,
    /// Children in the fork measurement (0 to skip). Default: 16 for microvm, 4 for process.
    #[arg(long)]
    fork: Option<u32>,
    #[arg(long)]
    images: Option<PathBuf>,
    #[arg(long, default_value = "tcg")]
    accel: String,
    /// Seconds to watch a paused sandbox's CPU use.
    #[arg(long, default_value_t = 2)]
    paused_watch_secs: u64,
    /// Setup a real session does after create (the work a restore saves):
    /// by default, build and load a dataset with Python.
    #[arg(long, default_value = DEFAULT_SETUP)]
    setup: String,
}

impl LifecycleArgs {
    /// What `stasis cost` measures: pause, resume and snapshot sizes after the
    /// default setup, without the fork measurement.
    pub fn for_cost(backend: &str, repeats: usize, images: Option<PathBuf>, accel: &str) -> Self {
        LifecycleArgs {
            backend: backend.to_string(),
            repeats,
            fork: Some(0),
            images,
            accel: accel.to_string(),
            paused_watch_secs: 2,
            setup: DEFAULT_SETUP.to_string(),
        }
    }
}

const DEFAULT_SETUP: &str = "python3 -c \"import json, random; random.seed(7); \
d = [{'i': i, 'v': random.random(), 's': str(i) * 3} for i in range(200000)]; \
json.dump(d, open('/workspace/data.json', 'w')); print(len(json.load(open('/workspace/data.json'))))\"";

pub async fn lifecycle(a: LifecycleArgs) -> Result<Value> {
    let (d, accel) = start_daemon(a.images.clone(), &a.accel).await?;
    let c = &d.client;
    let manifest = json!({"backend": a.backend, "lifecycle": {"on_idle": "nothing"}});
    let (
        mut create,
        mut first_exec,
        mut pause,
        mut resume,
        mut resume_exec,
        mut snapshot,
        mut restore_exec,
        mut cold_exec,
    ) = (
        vec![],
        vec![],
        vec![],
        vec![],
        vec![],
        vec![],
        vec![],
        vec![],
    );
    let mut setup = vec![];
    let (mut paused_cpu_ms_per_s, mut paused_rss, mut running_rss, mut snap_raw, mut snap_stored) =
        (vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..a.repeats.max(1) {
        let t = Instant::now();
        let sb = c.create(manifest.clone()).await?;
        create.push(ms_since(t));
        let id = sb.id;
        let t = Instant::now();
        exec_ok(c, &id, &["true"]).await?;
        first_exec.push(ms_since(t));
        cold_exec.push(
            create.last().copied().unwrap_or(0.0) + first_exec.last().copied().unwrap_or(0.0),
        );
        let t = Instant::now();
        exec_ok(c, &id, &["sh", "-c", &a.setup]).await?;
        setup.push(ms_since(t));
        running_rss.push(c.usage(&id).await?.rss_bytes as f64);

        let t = Instant::now();
        c.pause(&id, Some(true)).await?;
        pause.push(ms_since(t));
        let u0 = c.usage(&id).await?;
        tokio::time::sleep(Duration::from_secs(a.paused_watch_secs)).await;
        let u1 = c.usage(&id).await?;
        let cpu_ns = u1.cpu_ns as f64 - u0.cpu_ns as f64;
        paused_cpu_ms_per_s.push(cpu_ns / 1e6 / a.paused_watch_secs as f64);
        paused_rss.push(u1.rss_bytes as f64);

        let t = Instant::now();
        c.resume(&id).await?;
        resume.push(ms_since(t));
        exec_ok(c, &id, &["true"]).await?;
        resume_exec.push(ms_since(t));

        let t = Instant::now();
        let snap = c.snapshot(&id, Some(3600)).await?;
        snapshot.push(ms_since(t));
        snap_raw.push(snap.raw_bytes as f64);
        snap_stored.push(snap.stored_bytes as f64);
        let snap_id = snap.id.to_string();
        let t = Instant::now();
        let child = c.restore(&snap_id, None).await?;
        let cid = child.id;
        exec_ok(c, &cid, &["true"]).await?;
        restore_exec.push(ms_since(t));
        c.destroy(&cid).await?;
        c.destroy(&id).await?;
        let _ = c.delete(&format!("/v1/snapshots/{snap_id}")).await;
    }
    let mut report = json!({
        "backend": a.backend,
        "accelerator": accel,
        "repeats": a.repeats,
        "median_ms": {
            "create": median(&mut create),
            "first_exec": median(&mut first_exec),
            "cold_create_to_first_exec": median(&mut cold_exec),
            "setup": median(&mut setup),
            "pause": median(&mut pause),
            "resume": median(&mut resume),
            "resume_to_first_exec": median(&mut resume_exec),
            "snapshot": median(&mut snapshot),
            "restore_to_first_exec": median(&mut restore_exec),
        },
        "paused": {
            "cpu_ms_per_s": median(&mut paused_cpu_ms_per_s),
            "host_rss_bytes": median(&mut paused_rss),
        },
        "running_host_rss_bytes": median(&mut running_rss),
        "snapshot_bytes": {"raw": median(&mut snap_raw), "stored": median(&mut snap_stored)},
    });
    let m = &report["median_ms"];
    let restore = m["restore_to_first_exec"].as_f64().unwrap_or(0.0);
    let cold = m["cold_create_to_first_exec"].as_f64().unwrap_or(0.0);
    let cold_setup = cold + m["setup"].as_f64().unwrap_or(0.0);
    let resume = m["resume_to_first_exec"].as_f64().unwrap_or(0.0);
    report["ratios"] = json!({
        "restore_vs_cold_create": restore / cold.max(1e-9),
        "restore_vs_cold_create_plus_setup": restore / cold_setup.max(1e-9),
        "resume_vs_cold_create_plus_setup": resume / cold_setup.max(1e-9),
    });
    report["setup_command"] = json!(a.setup);
    // Always-running vs pause-on-idle for the example workload, priced with
    // the figures above (`stasis cost --from` for another profile or prices).
    report["cost"] = section(&report)?;
    let forks = a
        .fork
        .unwrap_or(if a.backend == "microvm" { 16 } else { 4 });
    if forks > 0 {
        report["fork"] = fork_bench(c, &manifest, forks).await?;
    }
    Ok(report)
}

/// The cost section of a lifecycle bench report: the example profile at the
/// example prices.
pub fn section(bench: &Value) -> Result<Value> {
    let r = compare(
        &Profile::example(),
        &Prices::example(),
        &Measured::from_bench(bench)?,
    )?;
    Ok(serde_json::to_value(r).unwrap_or_default())
}

async fn fork_bench(c: &Client, manifest: &Value, n: u32) -> Result<Value> {
    let sb = c.create(manifest.clone()).await?;
    let id = sb.id;
    exec_ok(c, &id, &["true"]).await?;
    let one_rss = c.usage(&id).await?.rss_bytes;
    let t = Instant::now();
    let f = c.fork(&id, n).await?;
    let fork_ms = ms_since(t);
    let kids: Vec<String> = f.sandboxes.into_iter().map(|s| s.id).collect();
    let (mut total_rss, mut total_pss) = (0u64, 0u64);
    for k in &kids {
        exec_ok(c, k, &["true"]).await?;
        let u = c.usage(k).await?;
        total_rss += u.rss_bytes;
        total_pss += u.pss_bytes;
    }
    for k in &kids {
        c.destroy(k).await?;
    }
    c.destroy(&id).await?;
    let _ = c.delete(&format!("/v1/snapshots/{}", f.snapshot)).await;
    Ok(json!({
        "children": kids.len(),
        "total_ms": fork_ms,
        "per_child_ms": fork_ms / kids.len().max(1) as f64,
        "one_sandbox_rss_bytes": one_rss,
        "children_total_rss_bytes": total_rss,
        "total_rss_vs_one": total_rss as f64 / one_rss.max(1) as f64,
        // Shared copy-on-write pages counted once: the real memory cost.
        "children_total_pss_bytes": total_pss,
        "total_pss_vs_one": total_pss as f64 / one_rss.max(1) as f64,
    }))
}
