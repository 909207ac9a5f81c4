//! The arithmetic, checked against figures worked out by hand.

use super::*;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

macro_rules! assert_close {
    ($a:expr, $b:expr) => {
        assert!(
            close($a, $b),
            "{} = {} , expected {}",
            stringify!($a),
            $a,
            $b
        )
    };
}

fn zero_measured() -> Measured {
    Measured {
        backend: "test".into(),
        accelerator: None,
        pause_secs: 0.0,
        resume_secs: 0.0,
        snapshot_raw_bytes: 0.0,
        snapshot_stored_bytes: 0.0,
        paused_resident_bytes: 0.0,
        paused_vcpus: 0.0,
        standby_resident_bytes: 0.0,
        standby_resume_secs: None,
        incremental_pause_secs: None,
    }
}

/// Round numbers: 6 bursts of 60 s in an hour, 2 GiB, 1 vCPU, idle timeout
/// 30 s, pause 5 s, resume 5 s; 1 GiB stored; storage at 1e-6 per GiB-second.
fn round_case() -> (Profile, Prices, Measured) {
    let profile = Profile {
        burst_secs: 60.0,
        period_secs: 600.0,
        horizon_secs: 3600.0,
        ram_gib: 2.0,
        vcpus: 1.0,
        idle_timeout_secs: 30.0,
        standby_secs: 0.0,
    };
    let prices = Prices {
        vcpu_second: 0.001,
        gib_second: 0.0005,
        storage_gib_month: MONTH_SECS * 1e-6,
        per_resume: 0.01,
    };
    let measured = Measured {
        pause_secs: 5.0,
        resume_secs: 5.0,
        snapshot_raw_bytes: 4.0 * GIB,
        snapshot_stored_bytes: GIB,
        ..zero_measured()
    };
    (profile, prices, measured)
}

#[test]
fn round_numbers_by_hand() {
    let (profile, prices, measured) = round_case();
    let r = compare(&profile, &prices, &measured).unwrap();
    // Always running: 3600 s x 1 vCPU x 0.001 = 3.6; 3600 s x 2 GiB x 0.0005 = 3.6.
    assert_close!(r.always_running.compute, 3.6);
    assert_close!(r.always_running.memory, 3.6);
    assert_close!(r.always_running.total, 7.2);
    // Each period runs 5 (resume) + 60 + 30 (idle timeout) + 5 (pause) = 100 s
    // and is paused 500 s; 6 periods -> 600 s running.
    assert!(r.pauses);
    assert_close!(r.cycles, 6.0);
    assert_close!(r.running_secs_per_cycle, 100.0);
    assert_close!(r.paused_secs_per_cycle, 500.0);
    assert_close!(r.pause_on_idle.compute, 0.6);
    assert_close!(r.pause_on_idle.memory, 0.6);
    // 1 GiB kept for the whole hour at 1e-6 per GiB-second; 6 resumes at 0.01.
    assert_close!(r.pause_on_idle.storage, 0.0036);
    assert_close!(r.pause_on_idle.resumes, 0.06);
    assert_close!(r.pause_on_idle.total, 1.2636);
    assert_close!(r.ratio, 7.2 / 1.2636);
    assert_close!(r.ideal_ratio, 10.0);
    assert_close!(r.timing_bound, 6.0);
    assert_close!(r.added_latency_secs_per_burst, 5.0);
}

#[test]
fn what_a_paused_sandbox_still_holds_is_billed() {
    // Like the process backend: a frozen cgroup keeps its memory (0.5 GiB
    // here) and uses a little CPU (0.01 vCPU); no storage, no resume fee.
    let (profile, mut prices, mut measured) = round_case();
    prices.per_resume = 0.0;
    measured.snapshot_stored_bytes = 0.0;
    measured.paused_resident_bytes = 0.5 * GIB;
    measured.paused_vcpus = 0.01;
    let r = compare(&profile, &prices, &measured).unwrap();
    // Paused 6 x 500 = 3000 s: CPU 3000 x 0.01 x 0.001 = 0.03,
    // memory 3000 x 0.5 x 0.0005 = 0.75.
    assert_close!(r.pause_on_idle.compute, 0.63);
    assert_close!(r.pause_on_idle.memory, 1.35);
    assert_close!(r.pause_on_idle.storage, 0.0);
    assert_close!(r.pause_on_idle.total, 1.98);
    assert_close!(r.ratio, 7.2 / 1.98);
}

#[test]
fn no_pause_when_the_idle_gap_is_too_short() {
    // 60 s burst every 100 s, idle timeout 30 s, pause 5 s, resume 5 s: the
    // 40 s gap never outlasts timeout + pause + resume.
    let (mut profile, prices, measured) = round_case();
    profile.period_secs = 100.0;
    let r = compare(&profile, &prices, &measured).unwrap();
    assert!(!r.pauses);
    assert_eq!(r.pause_on_idle, r.always_running);
    assert_close!(r.ratio, 1.0);
    assert_close!(r.paused_secs_per_cycle, 0.0);
    assert_close!(r.added_latency_secs_per_burst, 0.0);
    assert_close!(r.timing_bound, 1.0);
}

fn idle_95() -> Profile {
    // A session active 3 minutes per hour (idle 95% of the time) for 8 hours.
    Profile {
        burst_secs: 180.0,
        period_secs: 3600.0,
        horizon_secs: 8.0 * 3600.0,
        ram_gib: 1.0,
        vcpus: 1.0,
        idle_timeout_secs: 0.0,
        standby_secs: 0.0,
    }
}

#[test]
fn idle_95_percent_is_20x_only_with_free_overheads() {
    let p = idle_95();
    assert_close!(p.idle_fraction(), 0.95);
    let r = compare(&p, &Prices::example(), &zero_measured()).unwrap();
    assert_close!(r.ideal_ratio, 20.0);
    assert_close!(r.ratio, 20.0);
}

#[test]
fn idle_95_percent_with_stasis_figures() {
    // Idle timeout 5 s (the manifest default), pause 0.06 s, resume 0.03 s,
    // a 3 MB stored snapshot, nothing resident while paused; example prices.
    let mut p = idle_95();
    p.idle_timeout_secs = 5.0;
    let m = Measured {
        pause_secs: 0.06,
        resume_secs: 0.03,
        snapshot_raw_bytes: 13e6,
        snapshot_stored_bytes: 3e6,
        ..zero_measured()
    };
    let r = compare(&p, &Prices::example(), &m).unwrap();
    // Always: 8 h x (0.04048 + 0.004445) per hour = 0.3594.
    assert_close!(r.always_running.total, 0.3594);
    // 8 x 185.09 s = 1480.72 s running at 0.044925/3600 per s = 0.018478151666...
    assert_close!(
        r.pause_on_idle.compute + r.pause_on_idle.memory,
        0.018478151666666668
    );
    // 3e6 B = 0.0027939677 GiB x 28800 s x 0.023 / 2628000 s = 7.0423296e-7.
    assert_close!(r.pause_on_idle.storage, 7.042329605311564e-7);
    assert_close!(r.ratio, 19.44925605525452);
    assert_close!(r.timing_bound, 3600.0 / 185.09);
}

#[test]
fn the_idle_timeout_is_what_bounds_it_most() {
    // Same figures, idle timeout 60 s: 3600 / 240.09 = 14.99x at best.
    let mut p = idle_95();
    p.idle_timeout_secs = 60.0;
    let m = Measured {
        pause_secs: 0.06,
        resume_secs: 0.03,
        ..zero_measured()
    };
    let r = compare(&p, &Prices::example(), &m).unwrap();
    assert_close!(r.ratio, 3600.0 / 240.09);
}

#[test]
fn bad_input_names_the_field() {
    let (mut profile, prices, measured) = round_case();
    profile.burst_secs = 700.0;
    let e = compare(&profile, &prices, &measured).unwrap_err();
    assert_eq!(e.field.as_deref(), Some("burst_secs"));
    let (mut profile, _, _) = round_case();
    profile.ram_gib = 0.0;
    assert_eq!(
        compare(&profile, &prices, &measured)
            .unwrap_err()
            .field
            .as_deref(),
        Some("ram_gib")
    );
    let (profile, mut prices, _) = round_case();
    prices.gib_second = f64::NAN;
    assert_eq!(
        compare(&profile, &prices, &measured)
            .unwrap_err()
            .field
            .as_deref(),
        Some("gib_second")
    );
    let (profile, prices, mut measured) = round_case();
    measured.resume_secs = -1.0;
    assert_eq!(
        compare(&profile, &prices, &measured)
            .unwrap_err()
            .field
            .as_deref(),
        Some("resume_secs")
    );
}

#[test]
fn reads_a_bench_lifecycle_report() {
    let v = serde_json::json!({
        "backend": "microvm",
        "accelerator": "tcg",
        "median_ms": {"pause": 1250.0, "resume_to_first_exec": 1040.0, "create": 3000.0},
        "paused": {"cpu_ms_per_s": 0.0, "host_rss_bytes": 0.0},
        "snapshot_bytes": {"raw": 243e6, "stored": 46e6},
    });
    let m = Measured::from_bench(&v).unwrap();
    assert_eq!(m.backend, "microvm");
    assert_eq!(m.accelerator.as_deref(), Some("tcg"));
    assert_close!(m.pause_secs, 1.25);
    assert_close!(m.resume_secs, 1.04);
    assert_close!(m.snapshot_stored_bytes, 46e6);
    let e = Measured::from_bench(&serde_json::json!({"backend": "process"})).unwrap_err();
    assert!(e.message.contains("median_ms.pause"), "{}", e.message);
}

#[test]
fn table_shows_both_totals_and_the_ratio() {
    let (profile, prices, measured) = round_case();
    let r = compare(&profile, &prices, &measured).unwrap();
    let t = render(&r);
    assert!(t.contains("always running"), "{t}");
    assert!(t.contains("7.200000"), "{t}");
    assert!(t.contains("1.263600"), "{t}");
    assert!(t.contains("5.70x"), "{t}");
}

/// Standby: the held RAM is paid for the window (no CPU); a burst that
/// comes while the sandbox is held waits only for the standby resume.
#[test]
fn standby_pays_its_memory_and_shortens_the_resume_it_covers() {
    let (mut p, prices, mut m) = round_case();
    m.standby_resident_bytes = 0.5 * GIB;
    m.standby_resume_secs = Some(0.1);
    // Window 100 s, gap 505 s: held 100 s per period; the next burst finds
    // it released (resume 5 s).
    p.standby_secs = 100.0;
    let r = compare(&p, &prices, &m).unwrap();
    let busy = 60.0 + 30.0 + 5.0 + 5.0;
    assert_close!(r.running_secs_per_cycle, busy);
    assert_close!(r.standby_secs_per_cycle, 100.0);
    let cycles = 6.0;
    let memory = cycles * busy * 2.0 * 0.0005 + cycles * 100.0 * 0.5 * 0.0005;
    assert_close!(r.pause_on_idle.memory, memory);
    assert_close!(r.added_latency_secs_per_burst, 5.0);
    // A window longer than the gap: held all the paused time, the burst
    // waits 0.1 s.
    p.standby_secs = 1000.0;
    let r = compare(&p, &prices, &m).unwrap();
    let busy = 60.0 + 30.0 + 5.0 + 0.1;
    assert_close!(r.running_secs_per_cycle, busy);
    assert_close!(r.standby_secs_per_cycle, 600.0 - busy);
    assert_close!(r.added_latency_secs_per_burst, 0.1);
    let memory = cycles * busy * 2.0 * 0.0005 + cycles * (600.0 - busy) * 0.5 * 0.0005;
    assert_close!(r.pause_on_idle.memory, memory);
}

/// Later pauses are incremental: each cycle pays the incremental pause, the
/// horizon's first pause its extra time once.
#[test]
fn incremental_pauses_price_each_cycle_and_the_first_once() {
    let (profile, prices, mut m) = round_case();
    let full = compare(&profile, &prices, &m).unwrap();
    m.incremental_pause_secs = Some(1.0);
    let inc = compare(&profile, &prices, &m).unwrap();
    // 6 cycles, each 4 s shorter, plus 4 s once: 20 s less running.
    assert_close!(
        full.running_secs_per_cycle - inc.running_secs_per_cycle,
        4.0
    );
    let per_running_sec = profile.vcpus * prices.vcpu_second + profile.ram_gib * prices.gib_second;
    let saved = full.pause_on_idle.total - inc.pause_on_idle.total;
    // Paused time grows by what running lost: priced at the paused rates (0 here).
    assert_close!(saved, 20.0 * per_running_sec);
    // An incremental figure above the first changes nothing extra.
    m.incremental_pause_secs = Some(5.0);
    let same = compare(&profile, &prices, &m).unwrap();
    assert_close!(same.pause_on_idle.total, full.pause_on_idle.total);
    m.incremental_pause_secs = Some(-1.0);
    assert!(compare(&profile, &prices, &m).is_err());
}
