//! `stasis cost`: always-running against pause-on-idle for a workload
//! profile, priced with figures measured on this machine (a quick lifecycle
//! bench on a temporary daemon) or read from a `stasis bench lifecycle --json`
//! report. The arithmetic is in the `stasis-cost` crate.

use std::path::PathBuf;

use clap::Args;
use serde_json::Value;

use stasis_core::{Error, Result};
use stasis_cost::{compare, render, Measured, Prices, Profile, Report};

#[derive(Args, Clone)]
pub struct CostArgs {
    /// Read the measured figures from a `stasis bench lifecycle --json` report
    /// instead of measuring now.
    #[arg(long)]
    from: Option<PathBuf>,
    /// Backend to measure (without --from).
    #[arg(long, default_value = "process")]
    backend: String,
    /// Lifecycle repeats of the measurement (without --from).
    #[arg(long, default_value_t = 3)]
    repeats: usize,
    #[arg(long)]
    images: Option<PathBuf>,
    #[arg(long, default_value = "tcg")]
    accel: String,
    /// Seconds of activity per burst [default: 30].
    #[arg(long)]
    burst_secs: Option<f64>,
    /// Minutes from one burst to the next [default: 10].
    #[arg(long)]
    period_mins: Option<f64>,
    /// Hours the workload goes on [default: 24].
    #[arg(long)]
    hours: Option<f64>,
    /// Sandbox memory, GiB [default: 1].
    #[arg(long)]
    ram_gib: Option<f64>,
    /// Sandbox vCPUs [default: 1].
    #[arg(long)]
    vcpus: Option<f64>,
    /// Idle window before the sandbox is paused, seconds [default: 5, the manifest default].
    #[arg(long)]
    idle_secs: Option<f64>,
    /// Standby window after each pause, seconds [default: 60, the daemon's default].
    #[arg(long)]
    standby_secs: Option<f64>,
    /// Price of a vCPU-second [default: 0.04048/3600, an example list price].
    #[arg(long)]
    price_vcpu_second: Option<f64>,
    /// Price of a GiB-second of memory [default: 0.004445/3600, an example list price].
    #[arg(long)]
    price_gib_second: Option<f64>,
    /// Price of a GiB-month of snapshot storage [default: 0.023, an example list price].
    #[arg(long)]
    price_storage_gib_month: Option<f64>,
    /// Fixed price per resume (request fees) [default: 0].
    #[arg(long)]
    price_per_resume: Option<f64>,
}

impl CostArgs {
    fn profile(&self) -> Profile {
        let d = Profile::example();
        Profile {
            burst_secs: self.burst_secs.unwrap_or(d.burst_secs),
            period_secs: self.period_mins.map(|m| m * 60.0).unwrap_or(d.period_secs),
            horizon_secs: self.hours.map(|h| h * 3600.0).unwrap_or(d.horizon_secs),
            ram_gib: self.ram_gib.unwrap_or(d.ram_gib),
            vcpus: self.vcpus.unwrap_or(d.vcpus),
            idle_timeout_secs: self.idle_secs.unwrap_or(d.idle_timeout_secs),
            standby_secs: self.standby_secs.unwrap_or(d.standby_secs),
        }
    }

    fn prices(&self) -> Prices {
        let d = Prices::example();
        Prices {
            vcpu_second: self.price_vcpu_second.unwrap_or(d.vcpu_second),
            gib_second: self.price_gib_second.unwrap_or(d.gib_second),
            storage_gib_month: self.price_storage_gib_month.unwrap_or(d.storage_gib_month),
            per_resume: self.price_per_resume.unwrap_or(d.per_resume),
        }
    }
}

pub async fn run(a: CostArgs, json_out: bool) -> Result<()> {
    // Check the profile and prices before spending a minute measuring.
    let (profile, prices) = (a.profile(), a.prices());
    profile.validate()?;
    prices.validate()?;
    let (bench, source) = match &a.from {
        Some(f) => {
            let text = std::fs::read_to_string(f)
                .map_err(|e| Error::invalid(format!("cannot read {}: {e}", f.display())))?;
            let v: Value = serde_json::from_str(&text).map_err(|e| {
                Error::invalid(format!("{} is not a JSON report: {e}", f.display()))
            })?;
            (v, format!("file {}", f.display()))
        }
        None => {
            let args = crate::lifecycle::LifecycleArgs::for_cost(
                &a.backend,
                a.repeats,
                a.images.clone(),
                &a.accel,
            );
            (
                crate::lifecycle::lifecycle(args).await?,
                "measured now".to_string(),
            )
        }
    };
    let measured = Measured::from_bench(&bench)?;
    let report: Report = compare(&profile, &prices, &measured)?;
    if json_out {
        let mut v = serde_json::to_value(&report).unwrap_or_default();
        v["source"] = Value::String(source);
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        println!("figures: {source}");
        print!("{}", render(&report));
    }
    Ok(())
}
