//! `stasis demo`: an agent session end to end on a temporary daemon — create a
//! sandbox, write a file, set a variable in a Python session, let the idle
//! policy pause it, then make the next request and show that both survived.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use serde_json::{json, Value};

use stasis_core::{Error, Result};

use crate::temp_daemon::TempDaemon;

#[derive(Args)]
pub struct DemoArgs {
    /// process or microvm (default: microvm when a guest image is built, else process).
    #[arg(long)]
    backend: Option<String>,
    /// Guest images directory (default: $STASIS_IMAGES or ./.stasis/images).
    #[arg(long)]
    images: Option<PathBuf>,
    /// microVM accelerator: auto, kvm or tcg.
    #[arg(long, default_value = "tcg")]
    accel: String,
    /// Idle seconds before the sandbox is paused.
    #[arg(long, default_value_t = 3)]
    idle_secs: u64,
}

pub fn default_images() -> PathBuf {
    std::env::var_os("STASIS_IMAGES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(".stasis/images"))
}

struct Steps {
    t0: Instant,
    json: bool,
    log: Vec<Value>,
}

impl Steps {
    fn step(&mut self, what: &str, ms: Option<u64>, detail: Value) {
        let at = self.t0.elapsed().as_secs_f64();
        if !self.json {
            match ms {
                Some(ms) => println!("[{at:7.2}s] {what} ({ms} ms)"),
                None => println!("[{at:7.2}s] {what}"),
            }
        }
        self.log
            .push(json!({"at_s": at, "step": what, "ms": ms, "detail": detail}));
    }
}

fn ms(t: Instant) -> u64 {
    t.elapsed().as_millis() as u64
}

pub async fn run(a: DemoArgs, json_out: bool) -> Result<()> {
    let images = a.images.clone().unwrap_or_else(default_images);
    let images = images.canonicalize().unwrap_or(images);
    let backend = match a.backend.as_deref() {
        Some(b) => b.to_string(),
        None if images.join("default/vmlinux").exists() => "microvm".into(),
        None => "process".into(),
    };
    let mut s = Steps {
        t0: Instant::now(),
        json: json_out,
        log: Vec::new(),
    };
    let images_arg = images.display().to_string();
    let t = Instant::now();
    let d = TempDaemon::start(&["--images", &images_arg, "--accel", &a.accel], None).await?;
    let c = &d.client;
    let doctor = c.get("/v1/doctor").await?;
    let accel = doctor["microvm"]["accelerator"]["accelerator"].clone();
    s.step(
        &format!(
            "daemon started on {} (data dir {})",
            c.base(),
            d.data_dir.display()
        ),
        Some(ms(t)),
        json!({"accelerator": accel}),
    );

    let t = Instant::now();
    let sb = c
        .create(json!({
            "backend": backend,
            "lifecycle": {"idle_timeout_secs": a.idle_secs, "on_idle": "pause"},
        }))
        .await?;
    let id = sb.id;
    s.step(
        &format!("created {backend} sandbox {id}"),
        Some(ms(t)),
        json!({"state": sb.state}),
    );

    let t = Instant::now();
    c.put_file(
        &id,
        "notes.txt",
        b"the agent wrote this before the pause\n".to_vec(),
    )
    .await?;
    s.step("wrote /workspace/notes.txt", Some(ms(t)), Value::Null);

    let t = Instant::now();
    let sess = c.session_start(&id, &["python3", "-i", "-u", "-q"]).await?;
    let sid = sess.id;
    c.session_send(&id, &sid, "x = 6 * 7; print('x is set to', x)\n")
        .await?;
    let (_, offset) = c
        .session_read_until(&id, &sid, 0, "x is set to 42", Duration::from_secs(60))
        .await?;
    s.step(
        &format!("python session {sid}: x = 6 * 7"),
        Some(ms(t)),
        Value::Null,
    );

    let t = Instant::now();
    let paused = c
        .wait_state(&id, "paused", Duration::from_secs(a.idle_secs + 120))
        .await?;
    let usage = c.usage(&id).await?;
    s.step(
        &format!(
            "idle for {} s: paused automatically ({} kind; host processes now {}, host RSS {} bytes)",
            a.idle_secs,
            paused.pause_kind.as_deref().unwrap_or("?"),
            usage.host_processes,
            usage.rss_bytes
        ),
        Some(ms(t)),
        json!({"sandbox": paused, "usage": usage}),
    );
    if let Some(snap) = paused.pause_snapshot.as_deref() {
        let info = c.snapshot_info(snap).await?;
        s.step(
            &format!(
                "pause snapshot {snap}: {} bytes raw, {} bytes stored (compressed, encrypted)",
                info.raw_bytes, info.stored_bytes
            ),
            None,
            Value::Null,
        );
    }

    let t = Instant::now();
    c.session_send(&id, &sid, "print('x after resume =', x)\n")
        .await?;
    let (text, _) = c
        .session_read_until(
            &id,
            &sid,
            offset,
            "x after resume = 42",
            Duration::from_secs(120),
        )
        .await?;
    let state = c.sandbox(&id).await?;
    s.step(
        &format!(
            "next request resumed it transparently: python still has x = 42 (state {})",
            state.state
        ),
        Some(ms(t)),
        json!({"output": text}),
    );

    let t = Instant::now();
    let r = c.exec(&id, &["cat", "notes.txt"], 30_000).await?;
    let content = r.stdout.as_str();
    if !content.contains("before the pause") {
        return Err(Error::internal(format!(
            "file did not survive: {content:?}"
        )));
    }
    s.step(
        &format!("file survived: {}", content.trim()),
        Some(ms(t)),
        Value::Null,
    );

    let t = Instant::now();
    c.destroy(&id).await?;
    s.step("destroyed the sandbox", Some(ms(t)), Value::Null);
    if json_out {
        println!(
            "{}",
            serde_json::to_string_pretty(&json!({"backend": backend, "steps": s.log}))
                .unwrap_or_default()
        );
    } else {
        println!("demo complete: the sandbox was paused while idle and resumed with its memory and files intact");
    }
    Ok(())
}
