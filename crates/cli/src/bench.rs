//! `stasis bench`: lifecycle and store figures, measured in one run on a
//! temporary daemon, reported as medians and ratios (never asserted).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use stasis_core::{Result, SnapshotId, TenantId};
use stasis_store::{MasterKey, Store};

use crate::lifecycle::{self, LifecycleArgs};
use crate::measure::{exec_ok, start_daemon};

#[derive(Subcommand)]
pub enum BenchCmd {
    /// create, first exec, pause, resume, snapshot, restore, fork; CPU while paused.
    Lifecycle(LifecycleArgs),
    /// Dedup, compression and throughput of the snapshot store on real sandbox snapshots.
    Store(StoreArgs),
    /// Create from a template (Python, dataset loaded) to first answer vs cold create + the same setup.
    Template(crate::bench_template::TemplateArgs),
    /// What N paused sandboxes cost one node: create rate, daemon RSS, host processes, RAM and disk per paused sandbox, list, reaper, resume + exec, restart reconcile.
    Scale(crate::bench_scale::ScaleArgs),
    /// Always-running vs pause-on-idle cost from a quick lifecycle measurement (same as `stasis cost`).
    Cost(crate::cost::CostArgs),
}

#[derive(Args)]
pub struct StoreArgs {
    #[arg(long, default_value = "process")]
    backend: String,
    /// MiB of data the sandbox holds when snapshotted.
    #[arg(long, default_value_t = 64)]
    data_mb: u64,
    #[arg(long)]
    images: Option<PathBuf>,
    #[arg(long, default_value = "tcg")]
    accel: String,
}

pub async fn run(cmd: BenchCmd, json_out: bool) -> Result<()> {
    let report = match cmd {
        BenchCmd::Lifecycle(a) => lifecycle::lifecycle(a).await?,
        BenchCmd::Store(a) => store(a).await?,
        BenchCmd::Template(a) => crate::bench_template::template(a).await?,
        BenchCmd::Scale(a) => crate::bench_scale::scale(a).await?,
        BenchCmd::Cost(a) => return crate::cost::run(a, json_out).await,
    };
    if json_out {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        print_flat("", &report);
    }
    Ok(())
}

fn print_flat(prefix: &str, v: &Value) {
    match v {
        Value::Object(m) => {
            for (k, val) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                print_flat(&p, val);
            }
        }
        other => println!("{prefix:<44} {other}"),
    }
}

async fn store(a: StoreArgs) -> Result<Value> {
    let (d, accel) = start_daemon(a.images.clone(), &a.accel).await?;
    let c = &d.client;
    let sb = c
        .create(json!({"backend": a.backend, "lifecycle": {"on_idle": "nothing"}}))
        .await?;
    let id = sb.id;
    // Realistic content: incompressible data, text, and an installed-package-like tree.
    let script = format!(
        "set -e; head -c {}M /dev/urandom > blob.bin; seq 1 200000 > numbers.txt; \
         mkdir -p pkg && for i in $(seq 1 200); do seq $i 5000 > pkg/mod$i.py; done",
        a.data_mb / 2
    );
    exec_ok(c, &id, &["sh", "-c", &script]).await?;
    let s1 = c.snapshot(&id, Some(3600)).await?;
    exec_ok(
        c,
        &id,
        &[
            "sh",
            "-c",
            "echo one more line >> numbers.txt; echo new > new.txt",
        ],
    )
    .await?;
    let s2 = c.snapshot(&id, Some(3600)).await?;
    let s1_id = s1.id.to_string();
    let s2_id = s2.id.to_string();
    c.destroy(&id).await?;

    // Throughput on the same bytes: restore both snapshots' artifacts from the
    // daemon's store, then write and verified-read them through a fresh store,
    // against a plain file copy in the same run.
    let tenant = TenantId::parse(stasis_server::api::DEFAULT_TENANT)?;
    let src = Store::open(
        &format!("file://{}", d.data_dir.join("store").display()),
        MasterKey::insecure_dev(),
    )
    .await?;
    stasis_server::governance::use_data_dir_keks(&src, &d.data_dir).await?;
    let scratch = tempfile::Builder::new().prefix("stasis-bench-").tempdir()?;
    let before = scratch.path().join("before");
    let after = scratch.path().join("after");
    let r1 = src
        .restore_snapshot(&tenant, &SnapshotId::parse(&s1_id)?, &before, None)
        .await?;
    src.restore_snapshot(&tenant, &SnapshotId::parse(&s2_id)?, &after, None)
        .await?;
    let names: Vec<(String, String)> = r1
        .artifacts
        .iter()
        .map(|a| (a.name.clone(), a.kind.clone()))
        .collect();
    let fresh_dir = scratch.path().join("store");
    std::fs::create_dir_all(&fresh_dir)?;
    let fresh = Store::open(
        &format!("file://{}", fresh_dir.display()),
        MasterKey::generate(),
    )
    .await?;
    let br = stasis_store::bench::bench_store(
        &fresh,
        &tenant,
        &before,
        &after,
        &names,
        &scratch.path().join("scratch"),
    )
    .await?;
    Ok(json!({
        "backend": a.backend,
        "accelerator": accel,
        "daemon_snapshots": {
            "first": {"raw_bytes": s1.raw_bytes, "stored_bytes": s1.stored_bytes, "new_stored_bytes": s1.new_stored_bytes},
            "second": {"raw_bytes": s2.raw_bytes, "stored_bytes": s2.stored_bytes, "new_stored_bytes": s2.new_stored_bytes, "dedup_ratio": s2.dedup_ratio},
        },
        "store": serde_json::to_value(&br).unwrap_or_default(),
        "ratios": {
            "dedup_second_snapshot": br.dedup_ratio_second,
            "compression": br.compression_ratio,
            "write_vs_plain_copy": br.write_first_mb_s / br.plain_copy_mb_s.max(1e-9),
            "verified_read_vs_plain_copy": br.verified_read_mb_s / br.plain_copy_mb_s.max(1e-9),
        }
    }))
}
