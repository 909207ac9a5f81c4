//! `stasis bench template`: a sandbox started from a template (Python with a
//! dataset loaded in a warm interpreter session) to its first answer, vs a
//! cold create plus the same setup to the same answer, on each backend, in
//! one run on a temporary daemon, reported as medians and their ratio
//! (never asserted); and the test Dockerfile's build time and image size
//! ([`crate::bench_image`]).
//!
//! The setup writes a JSON dataset of `--rows` records, starts
//! `python3 -i` in a session that loads it, and waits for it to say so; the
//! first answer is the session printing the dataset's length. From the
//! template, the session is already there with the data loaded when the
//! backend restores memory (microVM); where a restore brings back the disk
//! only (process backend) the dataset file is there but the interpreter
//! must be started and load it again, and the report says which happened.

use std::time::{Duration, Instant};

use clap::Args;
use serde_json::{json, Value};

use stasis_core::{Error, Result};

use crate::client::Client;
use crate::measure::{exec_ok, median, ms_since, start_daemon};

#[derive(Args)]
pub struct TemplateArgs {
    /// process, microvm, or both.
    #[arg(long, default_value = "both", value_parser = ["process", "microvm", "both"])]
    backend: String,
    /// Leave out the image build and size figures.
    #[arg(long)]
    no_image_build: bool,
    /// Records in the dataset the interpreter loads.
    #[arg(long, default_value_t = 200_000)]
    rows: u64,
    /// Measured rounds of each path (medians are reported).
    #[arg(long, default_value_t = 3)]
    rounds: u32,
    #[arg(long)]
    images: Option<std::path::PathBuf>,
    #[arg(long, default_value = "tcg")]
    accel: String,
}

const WAIT: Duration = Duration::from_secs(600);

fn make_data(rows: u64) -> String {
    format!(
        "import json, random; random.seed(7); \
         json.dump([{{'i': i, 'v': random.random(), 's': 'row-%d' % i}} for i in range({rows})], \
         open('data.json', 'w'))"
    )
}

const LOAD: &str = "import json; data = json.load(open('data.json')); print('loaded', len(data))";

/// Start the interpreter session and wait until it has the data loaded.
async fn warm_session(c: &Client, id: &str) -> Result<String> {
    let s = c
        .session_start(id, &["python3", "-u", "-i", "-c", LOAD])
        .await?;
    c.session_read_until(id, &s.id, 0, "loaded", WAIT).await?;
    Ok(s.id)
}

/// The first answer: the warm session prints the dataset's length.
async fn first_answer(c: &Client, id: &str, session: &str, rows: u64) -> Result<()> {
    let info = c
        .sessions(id)
        .await?
        .into_iter()
        .find(|s| s.id == session)
        .ok_or_else(|| Error::internal(format!("session {session} not in {id}")))?;
    c.session_send(id, session, "print('answer', len(data))\n")
        .await?;
    c.session_read_until(
        id,
        session,
        info.output_end,
        &format!("answer {rows}"),
        WAIT,
    )
    .await?;
    Ok(())
}

pub async fn template(a: TemplateArgs) -> Result<Value> {
    let (d, accel) = start_daemon(a.images.clone(), &a.accel).await?;
    let c = &d.client;
    let backends: &[&str] = match a.backend.as_str() {
        "both" => &["process", "microvm"],
        "microvm" => &["microvm"],
        _ => &["process"],
    };
    let image = if a.no_image_build {
        Value::Null
    } else {
        crate::bench_image::figures(c, &d.data_dir, backends.contains(&"microvm")).await?
    };
    let mut per_backend = Vec::new();
    for b in backends {
        per_backend.push(ratio(c, b, a.rows, a.rounds).await?);
    }
    Ok(json!({
        "accelerator": accel,
        "rows": a.rows,
        "rounds": a.rounds,
        "image": image,
        "backends": per_backend,
    }))
}

/// Cold create + setup + first answer vs from the template, on `backend`.
async fn ratio(c: &Client, backend: &str, rows: u64, rounds: u32) -> Result<Value> {
    let manifest = json!({"backend": backend, "lifecycle": {"on_idle": "nothing"}});
    let name = "bench-python-data";
    let (mut cold, mut warm) = (Vec::new(), Vec::new());
    let mut setup_ms = Vec::new();
    let mut restored_session = None;
    let mut template_ms = 0.0;
    let mut template_bytes = 0u64;
    for round in 0..rounds {
        // Cold: create, write the dataset, load it in a session, first answer.
        let t = Instant::now();
        let sb = c.create(manifest.clone()).await?;
        let t_setup = Instant::now();
        exec_ok(c, &sb.id, &["python3", "-c", &make_data(rows)]).await?;
        let session = warm_session(c, &sb.id).await?;
        setup_ms.push(ms_since(t_setup));
        first_answer(c, &sb.id, &session, rows).await?;
        cold.push(ms_since(t));

        if round == 0 {
            let t = Instant::now();
            let made = c.create_template(name, &sb.id).await?;
            template_ms = ms_since(t);
            template_bytes = c.snapshot_info(&made.snapshot).await?.raw_bytes;
        }
        c.destroy(&sb.id).await?;

        // From the template: create, first answer (the interpreter starts
        // again where the restore brings the disk only).
        let t = Instant::now();
        let sb = c.create_from_template(name, None).await?;
        let live = c
            .sessions(&sb.id)
            .await?
            .into_iter()
            .find(|s| s.running && s.argv.first().is_some_and(|a| a == "python3"));
        restored_session = Some(live.is_some());
        let session = match live {
            Some(s) => s.id,
            None => warm_session(c, &sb.id).await?,
        };
        first_answer(c, &sb.id, &session, rows).await?;
        warm.push(ms_since(t));
        c.destroy(&sb.id).await?;
    }
    c.delete_template(name).await?;
    let (cold_ms, warm_ms) = (median(&mut cold), median(&mut warm));
    Ok(json!({
        "backend": backend,
        "interpreter_state_restored": restored_session,
        "cold_create_setup_first_answer_ms": cold_ms,
        "setup_ms": median(&mut setup_ms),
        "template_create_to_first_answer_ms": warm_ms,
        "template_publish_ms": template_ms,
        "template_raw_bytes": template_bytes,
        "ratio_cold_over_template": cold_ms / warm_ms.max(1e-9),
    }))
}
