//! `stasis bench lifecycle`: create, first exec, pause (first and
//! incremental), every way back (standby, local files, the store), snapshot,
//! restore, file transfer and fork, timed and sized on a temporary daemon,
//! each with the backend's own breakdown, and the cost section they price;
//! `stasis cost` measures through it too.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::{json, Map, Value};

use stasis_core::Result;
use stasis_cost::{compare, Measured, Prices, Profile};
use stasis_server::http::sandboxes::Sandbox;

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
    /// MiB of the file put into and read out of a running sandbox (0 to skip).
    #[arg(long, default_value_t = 50)]
    file_mb: u64,
}

impl LifecycleArgs {
    /// What `stasis cost` measures: pause, resume and snapshot sizes after the
    /// default setup, without the fork and file measurements.
    pub fn for_cost(backend: &str, repeats: usize, images: Option<PathBuf>, accel: &str) -> Self {
        LifecycleArgs {
            backend: backend.to_string(),
            repeats,
            fork: Some(0),
            images,
            accel: accel.to_string(),
            paused_watch_secs: 2,
            setup: DEFAULT_SETUP.to_string(),
            file_mb: 0,
        }
    }
}

const DEFAULT_SETUP: &str = "python3 -c \"import json, random; random.seed(7); \
d = [{'i': i, 'v': random.random(), 's': str(i) * 3} for i in range(200000)]; \
json.dump(d, open('/workspace/data.json', 'w')); print(len(json.load(open('/workspace/data.json'))))\"";

/// Samples of one figure and of the breakdowns that came with them.
#[derive(Default)]
struct Series {
    ms: Vec<f64>,
    parts: Vec<Value>,
}

impl Series {
    fn push(&mut self, ms: f64, parts: Value) {
        self.ms.push(ms);
        self.parts.push(parts);
    }
    /// The median and the breakdown of the sample nearest to it.
    fn report(&mut self) -> (f64, Value) {
        let m = median(&mut self.ms.clone());
        let near = self
            .ms
            .iter()
            .enumerate()
            .min_by(|a, b| (a.1 - m).abs().total_cmp(&(b.1 - m).abs()))
            .map(|(i, _)| self.parts[i].clone())
            .unwrap_or(Value::Null);
        (m, near)
    }
}

/// A lifecycle answer's timing: total, backend, store, and the backend's phases.
fn parts(s: &Sandbox) -> Value {
    serde_json::to_value(&s.timing).unwrap_or(Value::Null)
}

/// The named figures of one repeat.
#[derive(Default)]
struct Figures {
    by: std::collections::BTreeMap<&'static str, Series>,
    bytes: std::collections::BTreeMap<&'static str, Vec<f64>>,
}

impl Figures {
    fn time(&mut self, name: &'static str, ms: f64, parts: Value) {
        self.by.entry(name).or_default().push(ms, parts);
    }
    fn size(&mut self, name: &'static str, v: f64) {
        self.bytes.entry(name).or_default().push(v);
    }
    fn median_of(&mut self, name: &str) -> f64 {
        self.by
            .get_mut(name)
            .map(|s| median(&mut s.ms))
            .unwrap_or(0.0)
    }
}

/// Pause (body as given), returning the answer and its wall time.
async fn timed_pause(c: &Client, id: &str, body: Value) -> Result<(Sandbox, f64)> {
    let t = Instant::now();
    let s = c.pause_body(id, body).await?;
    Ok((s, ms_since(t)))
}

/// Resume, then the first exec: wall time of both, and the resume's breakdown.
async fn resume_to_exec(c: &Client, id: &str) -> Result<(f64, f64, Value)> {
    let t = Instant::now();
    let s = c.resume(id).await?;
    let resume_ms = ms_since(t);
    exec_ok(c, id, &["true"]).await?;
    Ok((resume_ms, ms_since(t), parts(&s)))
}

/// Stored bytes of a sandbox's pause snapshot: raw, stored and new.
async fn pause_bytes(c: &Client, s: &Sandbox) -> Result<(f64, f64, f64)> {
    let Some(snap) = &s.pause_snapshot else {
        return Ok((0.0, 0.0, 0.0));
    };
    let i = c.snapshot_info(snap).await?;
    Ok((
        i.raw_bytes as f64,
        i.stored_bytes as f64,
        i.new_stored_bytes as f64,
    ))
}

pub async fn lifecycle(a: LifecycleArgs) -> Result<Value> {
    let (d, accel) = start_daemon(a.images.clone(), &a.accel).await?;
    let c = &d.client;
    let microvm = a.backend == "microvm";
    let manifest = json!({"backend": a.backend, "lifecycle": {"on_idle": "nothing"}});
    let mut f = Figures::default();
    let (mut paused_cpu_ms_per_s, mut paused_rss, mut running_rss, mut standby_rss) =
        (vec![], vec![], vec![], vec![]);
    for _ in 0..a.repeats.max(1) {
        let t = Instant::now();
        let sb = c.create(manifest.clone()).await?;
        f.time("create", ms_since(t), Value::Null);
        let id = sb.id;
        let t = Instant::now();
        exec_ok(c, &id, &["true"]).await?;
        f.time("first_exec", ms_since(t), Value::Null);
        let cold = f.by["create"].ms.last().copied().unwrap_or(0.0)
            + f.by["first_exec"].ms.last().copied().unwrap_or(0.0);
        f.time("cold_create_to_first_exec", cold, Value::Null);
        let t = Instant::now();
        exec_ok(c, &id, &["sh", "-c", &a.setup]).await?;
        f.time("setup", ms_since(t), Value::Null);
        for _ in 0..3 {
            let t = Instant::now();
            exec_ok(c, &id, &["true"]).await?;
            f.time("exec_running", ms_since(t), Value::Null);
        }
        running_rss.push(c.usage(&id).await?.rss_bytes as f64);

        // The first pause: everything is new to the store.
        let (s, ms) = timed_pause(c, &id, json!({"keep_memory": true})).await?;
        f.time("pause", ms, parts(&s));
        let (raw, stored, new) = pause_bytes(c, &s).await?;
        f.size("first_pause_raw", raw);
        f.size("first_pause_stored", stored);
        f.size("first_pause_new", new);
        let u0 = c.usage(&id).await?;
        tokio::time::sleep(Duration::from_secs(a.paused_watch_secs)).await;
        let u1 = c.usage(&id).await?;
        let cpu_ns = u1.cpu_ns as f64 - u0.cpu_ns as f64;
        paused_cpu_ms_per_s.push(cpu_ns / 1e6 / a.paused_watch_secs as f64);
        paused_rss.push(u1.rss_bytes as f64);

        // Back from this node's own files (microVM: local; process: frozen).
        let (r, rx, p) = resume_to_exec(c, &id).await?;
        f.time("resume", r, p.clone());
        f.time("resume_to_first_exec", rx, p);

        // A second pause after a small change: only what changed is new.
        exec_ok(c, &id, &["sh", "-c", "echo more >> /workspace/more.txt"]).await?;
        let (s, ms) = timed_pause(c, &id, json!({"keep_memory": true})).await?;
        f.time("incremental_pause", ms, parts(&s));
        let (_, _, new) = pause_bytes(c, &s).await?;
        f.size("incremental_pause_new", new);

        if microvm {
            // From the store alone: this node's files dropped first.
            c.evict(&id).await?;
            let (_, rx, p) = resume_to_exec(c, &id).await?;
            f.time("store_resume_to_first_exec", rx, p);
            // Standby: the stopped QEMU kept; the resume continues it.
            let (s, ms) =
                timed_pause(c, &id, json!({"keep_memory": true, "standby": true})).await?;
            f.time("standby_pause", ms, parts(&s));
            standby_rss.push(c.usage(&id).await?.rss_bytes as f64);
            let (_, rx, p) = resume_to_exec(c, &id).await?;
            f.time("standby_resume_to_first_exec", rx, p);
        }

        let t = Instant::now();
        let snap = c.snapshot(&id, Some(3600)).await?;
        f.time("snapshot", ms_since(t), Value::Null);
        f.size("snapshot_raw", snap.raw_bytes as f64);
        f.size("snapshot_stored", snap.stored_bytes as f64);
        let snap_id = snap.id.to_string();
        let t = Instant::now();
        let child = c.restore(&snap_id, None).await?;
        let restore_parts = parts(&child);
        exec_ok(c, &child.id, &["true"]).await?;
        f.time("restore_to_first_exec", ms_since(t), restore_parts);
        c.destroy(&child.id).await?;
        c.destroy(&id).await?;
        let _ = c.delete(&format!("/v1/snapshots/{snap_id}")).await;
    }
    let mut med = Map::new();
    let mut breakdown = Map::new();
    for (name, s) in f.by.iter_mut() {
        let (m, p) = s.report();
        med.insert(name.to_string(), json!(m));
        if !p.is_null() {
            breakdown.insert(name.to_string(), p);
        }
    }
    let mut sizes = Map::new();
    for (name, v) in f.bytes.iter_mut() {
        sizes.insert(name.to_string(), json!(median(v)));
    }
    let mut report = json!({
        "backend": a.backend,
        "accelerator": accel,
        "repeats": a.repeats,
        "median_ms": med,
        "breakdown": breakdown,
        "bytes": sizes,
        "paused": {
            "cpu_ms_per_s": median(&mut paused_cpu_ms_per_s),
            "host_rss_bytes": median(&mut paused_rss),
        },
        "running_host_rss_bytes": median(&mut running_rss),
        "snapshot_bytes": {"raw": median(f.bytes.get_mut("first_pause_raw").unwrap_or(&mut vec![])), "stored": median(f.bytes.get_mut("first_pause_stored").unwrap_or(&mut vec![]))},
    });
    if microvm {
        report["standby"] = json!({"host_rss_bytes": median(&mut standby_rss)});
    }
    report["ratios"] = ratios(&mut f);
    report["setup_command"] = json!(a.setup);
    // Always-running vs pause-on-idle for the example workload, priced with
    // the figures above (`stasis cost --from` for another profile or prices).
    report["cost"] = section(&report)?;
    if a.file_mb > 0 {
        report["files"] = file_bench(c, &manifest, a.file_mb).await?;
    }
    let forks = a.fork.unwrap_or(if microvm { 16 } else { 4 });
    if forks > 0 {
        report["fork"] = fork_bench(c, &manifest, forks).await?;
    }
    Ok(report)
}

/// The ratios the targets are stated in.
fn ratios(f: &mut Figures) -> Value {
    let cold = f.median_of("cold_create_to_first_exec");
    let cold_setup = cold + f.median_of("setup");
    let per = |x: f64, of: f64| x / of.max(1e-9);
    let mut r = json!({
        "restore_vs_cold_create": per(f.median_of("restore_to_first_exec"), cold),
        "restore_vs_cold_create_plus_setup": per(f.median_of("restore_to_first_exec"), cold_setup),
        "resume_vs_cold_create_plus_setup": per(f.median_of("resume_to_first_exec"), cold_setup),
        "incremental_vs_first_pause": per(f.median_of("incremental_pause"), f.median_of("pause")),
    });
    let mut first = f.bytes.get("first_pause_new").cloned().unwrap_or_default();
    let mut inc = f
        .bytes
        .get("incremental_pause_new")
        .cloned()
        .unwrap_or_default();
    r["incremental_vs_first_pause_new_bytes"] = json!(per(median(&mut inc), median(&mut first)));
    if f.by.contains_key("standby_resume_to_first_exec") {
        let running = f.median_of("exec_running");
        let standby = f.median_of("standby_resume_to_first_exec");
        r["standby_resume_added_ms"] = json!(standby - running);
        r["standby_resume_vs_cold_create_plus_setup"] = json!(per(standby, cold_setup));
        r["store_resume_vs_cold_create_plus_setup"] =
            json!(per(f.median_of("store_resume_to_first_exec"), cold_setup));
    }
    r
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

/// Put and get a file of `mb` MiB into a running sandbox: MB/s each way.
async fn file_bench(c: &Client, manifest: &Value, mb: u64) -> Result<Value> {
    let sb = c.create(manifest.clone()).await?;
    let id = sb.id;
    exec_ok(c, &id, &["true"]).await?;
    // Incompressible, so no layer can cheat.
    let mut data = vec![0u8; (mb << 20) as usize];
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for b in data.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = (x >> 24) as u8;
    }
    let mb_f = (data.len() as f64) / 1e6;
    let t = Instant::now();
    c.put_file(&id, "/workspace/bench.bin", data.clone())
        .await?;
    let put_ms = ms_since(t);
    let t = Instant::now();
    let back = c.get_file(&id, "/workspace/bench.bin").await?;
    let get_ms = ms_since(t);
    c.destroy(&id).await?;
    if back != data {
        return Err(stasis_core::Error::internal(
            "the file read back differs from the file put",
        ));
    }
    Ok(json!({
        "bytes": data.len(),
        "put_ms": put_ms,
        "get_ms": get_ms,
        "put_mb_s": mb_f / (put_ms / 1000.0).max(1e-9),
        "get_mb_s": mb_f / (get_ms / 1000.0).max(1e-9),
    }))
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
    let mut first_exec = Vec::new();
    for k in &kids {
        let t = Instant::now();
        exec_ok(c, k, &["true"]).await?;
        first_exec.push(ms_since(t));
        let u = c.usage(k).await?;
        total_rss += u.rss_bytes;
        total_pss += u.pss_bytes;
    }
    // New code in a fork (an interpreter's start, twice: translated, then
    // from the code cache), the price of a small translation buffer
    // (`--tcg-tb-mb-restore`); on a few children, after the memory figures.
    let (mut new_code, mut again) = (Vec::new(), Vec::new());
    for k in kids.iter().take(3) {
        let t = Instant::now();
        exec_ok(c, k, &["python3", "-c", "pass"]).await?;
        new_code.push(ms_since(t));
        let t = Instant::now();
        exec_ok(c, k, &["python3", "-c", "pass"]).await?;
        again.push(ms_since(t));
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
        "child_first_exec_ms": median(&mut first_exec),
        "child_python_first_ms": median(&mut new_code),
        "child_python_again_ms": median(&mut again),
        "one_sandbox_rss_bytes": one_rss,
        "children_total_rss_bytes": total_rss,
        "total_rss_vs_one": total_rss as f64 / one_rss.max(1) as f64,
        // Shared copy-on-write pages counted once: the real memory cost.
        "children_total_pss_bytes": total_pss,
        "total_pss_vs_one": total_pss as f64 / one_rss.max(1) as f64,
    }))
}
