//! What a sandbox costs when it runs all the time, against what it costs when
//! stasis pauses it on idle, for a bursty workload and a price list.
//!
//! The workload is a train of bursts: `burst_secs` of activity every
//! `period_secs`, for `horizon_secs`, in a sandbox sized `vcpus` x `ram_gib`.
//!
//! * **Always running** pays compute and memory for the whole horizon.
//! * **Pause on idle** pays compute and memory while the sandbox runs. In each
//!   period it runs for the resume that the burst's first request waits for,
//!   the burst itself, the idle timeout that has to pass before the reaper
//!   pauses it, and the pause. The rest of the period it is paused, and pays
//!   what a paused sandbox really holds (measured: host memory still resident
//!   and CPU still used, both zero for a microVM, whose QEMU is gone; a frozen
//!   cgroup on the process backend keeps its memory), and the snapshot's stored
//!   bytes at the storage price. Stasis keeps a sandbox's last pause snapshot
//!   until the next pause replaces it, so storage is paid over the whole
//!   horizon. An optional fixed price per resume covers request fees.
//!   When `burst + idle timeout + pause + resume` does not fit in a period the
//!   sandbox never pauses and both strategies cost the same.
//!
//! **Standby**: after each pause the sandbox's stopped compute may be kept
//! for `standby_secs` (stasis's default 60 s). In that time it pays the host
//! memory the standby really holds (measured) and no CPU; a burst that comes
//! while it is held waits only for the standby resume (measured), else for
//! a resume from the node's local files. Standby trades a little memory for
//! latency: with a gap far longer than the window its cost is small.
//!
//! Steady state is assumed: every period has one resume and one pause (the
//! first create and the final destroy are left out of both sides), and disk of
//! a running sandbox is not priced on either side.
//!
//! What bounds the ratio: with free storage and nothing resident while paused
//! the ratio is `period / (burst + idle timeout + pause + resume)`
//! ([`Report::timing_bound`]); the often-quoted `period / burst`
//! ([`Report::ideal_ratio`], 20x for a session idle 95% of the time) is only
//! reached with a zero idle timeout and instant pause and resume. Storage and
//! paused residency lower it further.

use serde::{Deserialize, Serialize};
use stasis_core::{Error, Result};

/// Seconds in the month that storage prices are quoted per (730 hours, the
/// usual cloud billing month).
pub const MONTH_SECS: f64 = 730.0 * 3600.0;
pub const GIB: f64 = 1024.0 * 1024.0 * 1024.0;

/// A bursty workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Seconds of activity per burst.
    pub burst_secs: f64,
    /// Seconds from one burst's start to the next one's.
    pub period_secs: f64,
    /// How long the workload goes on, seconds.
    pub horizon_secs: f64,
    pub ram_gib: f64,
    pub vcpus: f64,
    /// Idle window after which stasis pauses the sandbox.
    pub idle_timeout_secs: f64,
    /// Standby window after each pause (0: none).
    #[serde(default)]
    pub standby_secs: f64,
}

impl Profile {
    /// The example workload: a session active 30 s every 10 minutes (idle 95%
    /// of the time) for 24 hours, 1 vCPU and 1 GiB, paused after stasis's
    /// default idle window of 5 s.
    pub fn example() -> Self {
        Profile {
            burst_secs: 30.0,
            period_secs: 600.0,
            horizon_secs: 24.0 * 3600.0,
            ram_gib: 1.0,
            vcpus: 1.0,
            idle_timeout_secs: 5.0,
            standby_secs: 60.0,
        }
    }

    /// Fraction of the time the workload is idle.
    pub fn idle_fraction(&self) -> f64 {
        1.0 - self.burst_secs / self.period_secs
    }

    pub fn validate(&self) -> Result<()> {
        positive("burst_secs", self.burst_secs)?;
        positive("period_secs", self.period_secs)?;
        positive("horizon_secs", self.horizon_secs)?;
        positive("ram_gib", self.ram_gib)?;
        positive("vcpus", self.vcpus)?;
        non_negative("idle_timeout_secs", self.idle_timeout_secs)?;
        non_negative("standby_secs", self.standby_secs)?;
        if self.burst_secs > self.period_secs {
            return Err(Error::invalid(format!(
                "a burst of {} s does not fit in a period of {} s",
                self.burst_secs, self.period_secs
            ))
            .with_field("burst_secs"));
        }
        if self.period_secs > self.horizon_secs {
            return Err(Error::invalid(format!(
                "the period ({} s) is longer than the horizon ({} s)",
                self.period_secs, self.horizon_secs
            ))
            .with_field("period_secs"));
        }
        Ok(())
    }
}

/// Prices, in one currency.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prices {
    pub vcpu_second: f64,
    pub gib_second: f64,
    pub storage_gib_month: f64,
    /// Fixed price per resume (request fees); 0 by default.
    pub per_resume: f64,
}

impl Prices {
    /// Example list prices, for illustration only: on-demand container
    /// compute at USD 0.04048 per vCPU-hour and 0.004445 per GiB-hour, and
    /// object storage at USD 0.023 per GiB-month (the published us-east-1
    /// prices of AWS Fargate (Linux/x86) and S3 Standard). Override them with
    /// your own.
    pub fn example() -> Self {
        Prices {
            vcpu_second: 0.04048 / 3600.0,
            gib_second: 0.004445 / 3600.0,
            storage_gib_month: 0.023,
            per_resume: 0.0,
        }
    }

    pub fn validate(&self) -> Result<()> {
        non_negative("vcpu_second", self.vcpu_second)?;
        non_negative("gib_second", self.gib_second)?;
        non_negative("storage_gib_month", self.storage_gib_month)?;
        non_negative("per_resume", self.per_resume)
    }
}

/// Figures measured on a real daemon (`stasis bench lifecycle`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    pub backend: String,
    /// Accelerator of the microVM backend when it was measured (`tcg`, `kvm`).
    #[serde(default)]
    pub accelerator: Option<String>,
    /// A sandbox's first pause (everything is new to the store).
    pub pause_secs: f64,
    /// Every later pause, which stores only what changed since the one
    /// before (None: as `pause_secs`).
    #[serde(default)]
    pub incremental_pause_secs: Option<f64>,
    /// Resume until the first exec has answered.
    pub resume_secs: f64,
    pub snapshot_raw_bytes: f64,
    /// After deduplication and compression.
    pub snapshot_stored_bytes: f64,
    /// Host memory a paused sandbox still holds.
    pub paused_resident_bytes: f64,
    /// vCPU-seconds a paused sandbox uses per second.
    pub paused_vcpus: f64,
    /// Host memory a sandbox in standby holds (0 where not measured).
    #[serde(default)]
    pub standby_resident_bytes: f64,
    /// Resume of a sandbox in standby until the first exec has answered
    /// (None: as `resume_secs`).
    #[serde(default)]
    pub standby_resume_secs: Option<f64>,
}

impl Measured {
    /// Read the figures out of a `stasis bench lifecycle --json` report.
    pub fn from_bench(v: &serde_json::Value) -> Result<Self> {
        let num = |path: &[&str]| -> Result<f64> {
            let mut cur = v;
            for p in path {
                cur = &cur[*p];
            }
            cur.as_f64().ok_or_else(|| {
                Error::invalid(format!(
                    "not a `stasis bench lifecycle --json` report: no number at {}",
                    path.join(".")
                ))
            })
        };
        let m = Measured {
            backend: v["backend"].as_str().unwrap_or("unknown").to_string(),
            accelerator: v["accelerator"].as_str().map(str::to_string),
            pause_secs: num(&["median_ms", "pause"])? / 1000.0,
            incremental_pause_secs: num(&["median_ms", "incremental_pause"])
                .ok()
                .map(|ms| ms / 1000.0),
            resume_secs: num(&["median_ms", "resume_to_first_exec"])? / 1000.0,
            snapshot_raw_bytes: num(&["snapshot_bytes", "raw"])?,
            snapshot_stored_bytes: num(&["snapshot_bytes", "stored"])?,
            paused_resident_bytes: num(&["paused", "host_rss_bytes"])?,
            paused_vcpus: num(&["paused", "cpu_ms_per_s"])? / 1000.0,
            standby_resident_bytes: num(&["standby", "host_rss_bytes"]).unwrap_or(0.0),
            standby_resume_secs: num(&["median_ms", "standby_resume_to_first_exec"])
                .ok()
                .map(|ms| ms / 1000.0),
        };
        m.validate()?;
        Ok(m)
    }

    pub fn validate(&self) -> Result<()> {
        non_negative("pause_secs", self.pause_secs)?;
        non_negative("resume_secs", self.resume_secs)?;
        non_negative("snapshot_raw_bytes", self.snapshot_raw_bytes)?;
        non_negative("snapshot_stored_bytes", self.snapshot_stored_bytes)?;
        non_negative("paused_resident_bytes", self.paused_resident_bytes)?;
        non_negative("paused_vcpus", self.paused_vcpus)?;
        non_negative("standby_resident_bytes", self.standby_resident_bytes)?;
        if let Some(s) = self.standby_resume_secs {
            non_negative("standby_resume_secs", s)?;
        }
        if let Some(s) = self.incremental_pause_secs {
            non_negative("incremental_pause_secs", s)?;
        }
        Ok(())
    }
}

/// One strategy's bill, split by what it pays for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Costs {
    pub compute: f64,
    pub memory: f64,
    pub storage: f64,
    pub resumes: f64,
    pub total: f64,
}

impl Costs {
    fn new(compute: f64, memory: f64, storage: f64, resumes: f64) -> Self {
        Costs {
            compute,
            memory,
            storage,
            resumes,
            total: compute + memory + storage + resumes,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub profile: Profile,
    pub prices: Prices,
    pub measured: Measured,
    /// Bursts in the horizon.
    pub cycles: f64,
    /// Whether the sandbox pauses at all (its idle gap outlasts the idle
    /// timeout plus pause and resume).
    pub pauses: bool,
    /// Seconds per period the pause-on-idle sandbox runs (billed as running).
    pub running_secs_per_cycle: f64,
    pub paused_secs_per_cycle: f64,
    /// Of the paused time, seconds per period held in standby.
    #[serde(default)]
    pub standby_secs_per_cycle: f64,
    /// Latency the first request of each burst waits for the resume.
    pub added_latency_secs_per_burst: f64,
    pub always_running: Costs,
    pub pause_on_idle: Costs,
    /// always_running.total / pause_on_idle.total.
    pub ratio: f64,
    /// period / burst: the ratio with zero idle timeout, instant pause and
    /// resume, free storage and nothing resident while paused.
    pub ideal_ratio: f64,
    /// period / (burst + idle timeout + pause + resume): the ratio with free
    /// storage and nothing resident while paused.
    pub timing_bound: f64,
}

/// Cost of both strategies for `profile` at `prices` with `measured` figures.
pub fn compare(profile: &Profile, prices: &Prices, measured: &Measured) -> Result<Report> {
    profile.validate()?;
    prices.validate()?;
    measured.validate()?;
    let p = profile;
    let cycles = p.horizon_secs / p.period_secs;
    let always = Costs::new(
        p.horizon_secs * p.vcpus * prices.vcpu_second,
        p.horizon_secs * p.ram_gib * prices.gib_second,
        0.0,
        0.0,
    );
    // The gap a pause would fill: does the next burst come while the
    // sandbox is still held in standby?
    // Each cycle's pause has the previous one as parent: incremental. The
    // first pause of the horizon is a full one; its extra time is added once.
    let pause = measured
        .incremental_pause_secs
        .unwrap_or(measured.pause_secs);
    let first_extra = (measured.pause_secs - pause).max(0.0);
    let gap = p.period_secs - (p.burst_secs + p.idle_timeout_secs + pause);
    let resume = match measured.standby_resume_secs {
        Some(s) if gap <= p.standby_secs => s,
        _ => measured.resume_secs,
    };
    let busy = p.burst_secs + p.idle_timeout_secs + pause + resume;
    let pauses = busy < p.period_secs;
    let (running_per_cycle, paused_per_cycle, standby_per_cycle, pause_costs) = if pauses {
        let running = cycles * busy + first_extra;
        let paused = cycles * (p.period_secs - busy);
        let held = cycles * (p.period_secs - busy).min(p.standby_secs);
        let costs = Costs::new(
            running * p.vcpus * prices.vcpu_second
                + paused * measured.paused_vcpus * prices.vcpu_second,
            running * p.ram_gib * prices.gib_second
                + (paused - held) * (measured.paused_resident_bytes / GIB) * prices.gib_second
                + held * (measured.standby_resident_bytes / GIB) * prices.gib_second,
            (measured.snapshot_stored_bytes / GIB) * p.horizon_secs * prices.storage_gib_month
                / MONTH_SECS,
            cycles * prices.per_resume,
        );
        (busy, p.period_secs - busy, held / cycles, costs)
    } else {
        (p.period_secs, 0.0, 0.0, always.clone())
    };
    Ok(Report {
        profile: p.clone(),
        prices: prices.clone(),
        measured: measured.clone(),
        cycles,
        pauses,
        running_secs_per_cycle: running_per_cycle,
        paused_secs_per_cycle: paused_per_cycle,
        standby_secs_per_cycle: standby_per_cycle,
        added_latency_secs_per_burst: if pauses { resume } else { 0.0 },
        ratio: ratio(always.total, pause_costs.total),
        always_running: always,
        pause_on_idle: pause_costs,
        ideal_ratio: p.period_secs / p.burst_secs,
        timing_bound: p.period_secs / busy.min(p.period_secs),
    })
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        a / b
    } else if a > 0.0 {
        f64::INFINITY
    } else {
        1.0
    }
}

fn positive(field: &str, v: f64) -> Result<()> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(Error::invalid(format!("{field} must be a positive number, got {v}")).with_field(field))
    }
}

fn non_negative(field: &str, v: f64) -> Result<()> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(Error::invalid(format!("{field} must be a number >= 0, got {v}")).with_field(field))
    }
}

/// A human-readable table of a report.
pub fn render(r: &Report) -> String {
    let p = &r.profile;
    let m = &r.measured;
    let mut s = String::new();
    let accel = m
        .accelerator
        .as_deref()
        .map(|a| format!(" ({a})"))
        .unwrap_or_default();
    s.push_str(&format!(
        "workload: {} s bursts every {} s for {} h, {} vCPU, {} GiB, idle {:.1}% of the time; idle timeout {} s, standby {} s\n",
        p.burst_secs,
        p.period_secs,
        p.horizon_secs / 3600.0,
        p.vcpus,
        p.ram_gib,
        p.idle_fraction() * 100.0,
        p.idle_timeout_secs,
        p.standby_secs
    ));
    s.push_str(&format!(
        "measured on {}{accel}: pause {:.3} s (first) / {:.3} s (incremental), resume to first exec {:.3} s, snapshot {:.1} MB raw / {:.1} MB stored, paused: {:.1} MB resident, {:.4} vCPU\n",
        m.backend,
        m.pause_secs,
        m.incremental_pause_secs.unwrap_or(m.pause_secs),
        m.resume_secs,
        m.snapshot_raw_bytes / 1e6,
        m.snapshot_stored_bytes / 1e6,
        m.paused_resident_bytes / 1e6,
        m.paused_vcpus
    ));
    if m.standby_resident_bytes > 0.0 {
        s.push_str(&format!(
            "standby: {:.1} MB resident, no CPU; resume from standby to first exec {:.3} s\n",
            m.standby_resident_bytes / 1e6,
            m.standby_resume_secs.unwrap_or(m.resume_secs)
        ));
    }
    s.push_str(&format!(
        "per burst: running {:.1} s, paused {:.1} s (of it {:.1} s in standby){}\n\n",
        r.running_secs_per_cycle,
        r.paused_secs_per_cycle,
        r.standby_secs_per_cycle,
        if r.pauses {
            ""
        } else {
            " (never pauses: the idle gap is shorter than timeout + pause + resume)"
        }
    ));
    s.push_str(&format!(
        "{:<16}{:>12}{:>12}{:>12}{:>12}{:>12}\n",
        "", "compute", "memory", "storage", "resumes", "total"
    ));
    for (name, c) in [
        ("always running", &r.always_running),
        ("pause on idle", &r.pause_on_idle),
    ] {
        s.push_str(&format!(
            "{name:<16}{:>12.6}{:>12.6}{:>12.6}{:>12.6}{:>12.6}\n",
            c.compute, c.memory, c.storage, c.resumes, c.total
        ));
    }
    s.push_str(&format!(
        "\nratio always/pause: {:.2}x  (bound by timings alone: {:.2}x; ideal period/burst: {:.2}x)\n",
        r.ratio, r.timing_bound, r.ideal_ratio
    ));
    s.push_str(&format!(
        "each burst's first request waits {:.3} s for the resume\n",
        r.added_latency_secs_per_burst
    ));
    s
}

#[cfg(test)]
mod tests;
