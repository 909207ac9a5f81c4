//! `GET /metrics` on the real daemon (process backend): the exposition is
//! strict Prometheus text, and lifecycle, reaper and HTTP metrics move by
//! exactly what was done.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::Daemon;
use serde_json::json;

/// One sample: metric name, labels, value.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

struct Exposition {
    types: BTreeMap<String, String>,
    samples: Vec<Sample>,
}

fn valid_name(s: &str, colon: bool) -> bool {
    let mut chars = s.chars();
    let first_ok = |c: char| c.is_ascii_alphabetic() || c == '_' || (colon && c == ':');
    match chars.next() {
        Some(c) if first_ok(c) => {}
        _ => return false,
    }
    chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || (colon && c == ':'))
}

/// `{a="x",b="y\"z"}` -> map, and the rest of the line.
fn parse_labels(line: &str, at: usize) -> (BTreeMap<String, String>, usize) {
    let b = line.as_bytes();
    assert_eq!(b[at], b'{');
    let mut i = at + 1;
    let mut labels = BTreeMap::new();
    loop {
        if b[i] == b'}' {
            return (labels, i + 1);
        }
        let eq = line[i..].find('=').map(|p| p + i).expect("label =");
        let name = &line[i..eq];
        assert!(valid_name(name, false), "bad label name {name:?} in {line}");
        assert_eq!(b[eq + 1], b'"', "unquoted label value in {line}");
        let mut j = eq + 2;
        let mut val = String::new();
        loop {
            match b[j] {
                b'\\' => {
                    match b[j + 1] {
                        b'\\' => val.push('\\'),
                        b'"' => val.push('"'),
                        b'n' => val.push('\n'),
                        c => panic!("bad escape \\{} in {line}", c as char),
                    }
                    j += 2;
                }
                b'"' => break,
                b'\n' => panic!("raw newline in label value: {line}"),
                _ => {
                    let c = line[j..].chars().next().unwrap();
                    val.push(c);
                    j += c.len_utf8();
                }
            }
        }
        assert!(
            labels.insert(name.to_string(), val).is_none(),
            "duplicate label {name} in {line}"
        );
        i = j + 1;
        match b[i] {
            b',' => i += 1,
            b'}' => {}
            c => panic!("unexpected {:?} after label value in {line}", c as char),
        }
    }
}

fn parse_value(s: &str, line: &str) -> f64 {
    match s {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        _ => s
            .parse()
            .unwrap_or_else(|_| panic!("bad value {s:?} in {line}")),
    }
}

/// The family a sample belongs to (histogram samples carry suffixes).
fn family<'a>(name: &'a str, types: &BTreeMap<String, String>) -> &'a str {
    if types.contains_key(name) {
        return name;
    }
    for suf in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suf) {
            if types.get(base).map(String::as_str) == Some("histogram") {
                return base;
            }
        }
    }
    panic!("sample {name} has no # TYPE line before it")
}

/// A strict reader of the text exposition format 0.0.4: every line is a
/// HELP, a TYPE (before the family's samples, once) or a well-formed sample;
/// histogram buckets are cumulative and end in +Inf == _count.
fn parse(text: &str) -> Exposition {
    assert!(text.ends_with('\n'), "exposition must end with a newline");
    let mut types = BTreeMap::new();
    let mut samples = Vec::new();
    for line in text.lines() {
        assert!(!line.is_empty(), "empty line in exposition");
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let name = rest.split(' ').next().unwrap();
            assert!(valid_name(name, true), "bad HELP name in {line}");
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut it = rest.split(' ');
            let (name, ty) = (it.next().unwrap(), it.next().expect("type"));
            assert!(it.next().is_none(), "trailing text in {line}");
            assert!(valid_name(name, true), "bad TYPE name in {line}");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&ty),
                "bad type in {line}"
            );
            assert!(
                types.insert(name.to_string(), ty.to_string()).is_none(),
                "second TYPE for {name}"
            );
            assert!(
                !samples.iter().any(|s: &Sample| s.name.starts_with(name)),
                "TYPE {name} after its samples"
            );
            continue;
        }
        assert!(!line.starts_with('#'), "unknown comment line {line}");
        let name_end = line
            .find(['{', ' '])
            .unwrap_or_else(|| panic!("no value in {line}"));
        let name = &line[..name_end];
        assert!(valid_name(name, true), "bad metric name in {line}");
        let (labels, rest_at) = if line.as_bytes()[name_end] == b'{' {
            parse_labels(line, name_end)
        } else {
            (BTreeMap::new(), name_end)
        };
        let rest = line[rest_at..]
            .strip_prefix(' ')
            .unwrap_or_else(|| panic!("no space before value in {line}"));
        let mut parts = rest.split(' ');
        let value = parse_value(parts.next().unwrap(), line);
        if let Some(ts) = parts.next() {
            ts.parse::<i64>()
                .unwrap_or_else(|_| panic!("bad timestamp in {line}"));
        }
        assert!(parts.next().is_none(), "trailing text in {line}");
        family(name, &types);
        samples.push(Sample {
            name: name.to_string(),
            labels,
            value,
        });
    }
    let e = Exposition { types, samples };
    e.check_histograms();
    e
}

impl Exposition {
    fn check_histograms(&self) {
        for (fam, ty) in &self.types {
            if ty != "histogram" {
                continue;
            }
            let bucket = format!("{fam}_bucket");
            let count = format!("{fam}_count");
            for c in self.samples.iter().filter(|s| s.name == count) {
                let mut buckets: Vec<(f64, f64)> = self
                    .samples
                    .iter()
                    .filter(|s| {
                        s.name == bucket && {
                            let mut l = s.labels.clone();
                            l.remove("le");
                            l == c.labels
                        }
                    })
                    .map(|s| (parse_value(&s.labels["le"], &s.name), s.value))
                    .collect();
                buckets.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
                assert!(!buckets.is_empty(), "{fam} {:?} has no buckets", c.labels);
                assert!(
                    buckets.windows(2).all(|w| w[0].1 <= w[1].1),
                    "{fam} buckets not cumulative: {buckets:?}"
                );
                let last = buckets.last().unwrap();
                assert!(last.0.is_infinite(), "{fam} has no +Inf bucket");
                assert_eq!(last.1, c.value, "{fam}: +Inf bucket != _count");
            }
        }
    }

    /// The value of the one sample named `name` whose labels include `want`
    /// (0 when there is none: a series not yet created).
    fn get(&self, name: &str, want: &[(&str, &str)]) -> f64 {
        let hits: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| {
                s.name == name
                    && want
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect();
        assert!(hits.len() <= 1, "{name} {want:?} matches {hits:?}");
        hits.first().map(|s| s.value).unwrap_or(0.0)
    }

    fn ops(&self, op: &str, outcome: &str) -> f64 {
        self.get(
            "stasis_lifecycle_duration_seconds_count",
            &[("op", op), ("backend", "process"), ("outcome", outcome)],
        )
    }

    fn sandboxes(&self, state: &str) -> f64 {
        self.get(
            "stasis_sandboxes",
            &[("state", state), ("backend", "process")],
        )
    }

    fn http(&self, method: &str, route: &str, status: &str) -> f64 {
        self.get(
            "stasis_http_requests_total",
            &[("method", method), ("route", route), ("status", status)],
        )
    }
}

/// Scrape without any credentials: /metrics is open.
async fn scrape(d: &Daemon) -> Exposition {
    let r = reqwest::get(format!("{}/metrics", d.url)).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"].to_str().unwrap(),
        "text/plain; version=0.0.4"
    );
    parse(&r.text().await.unwrap())
}

const OPS: [&str; 6] = [
    "create", "pause", "resume", "restore", "snapshot", "destroy",
];

#[tokio::test]
async fn lifecycle_cycle_moves_counters_by_exactly_one() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let before = scrape(&d).await;
    // Every lifecycle series exists from the start, at zero.
    assert!(before
        .samples
        .iter()
        .any(|s| s.name == "stasis_lifecycle_duration_seconds_count"
            && s.labels.get("op").map(String::as_str) == Some("restore")));
    assert_eq!(before.types["stasis_leases_taken_over_total"], "counter");
    assert_eq!(before.get("stasis_leases_taken_over_total", &[]), 0.0);
    // The node's cap on local pause state: by default half the free disk.
    assert_eq!(before.types["stasis_local_pause_bytes"], "gauge");
    assert_eq!(before.types["stasis_local_pause_cap_bytes"], "gauge");
    assert_eq!(
        before.types["stasis_local_pause_evictions_total"],
        "counter"
    );
    assert!(before.get("stasis_local_pause_cap_bytes", &[]) > 0.0);
    assert_eq!(before.get("stasis_local_pause_bytes", &[]), 0.0);
    for op in OPS {
        assert_eq!(before.ops(op, "ok"), 0.0, "{op}");
        assert_eq!(before.ops(op, "error"), 0.0, "{op}");
    }

    let id = h
        .create(json!({"backend": "process", "lifecycle": {"on_idle": "nothing"}}))
        .await;
    h.sh(
        &id,
        "head -c 2000000 /dev/urandom > /workspace/blob; echo ok",
    )
    .await;
    let running = scrape(&d).await;
    assert_eq!(running.sandboxes("running"), 1.0);
    assert_eq!(running.sandboxes("paused"), 0.0);

    h.ok(
        "POST",
        &format!("/v1/sandboxes/{id}/pause"),
        Some(json!({})),
    )
    .await;
    let paused = scrape(&d).await;
    assert_eq!(paused.sandboxes("running"), 0.0);
    assert_eq!(paused.sandboxes("paused"), 1.0);
    // A process-backend pause keeps nothing evict could drop.
    assert_eq!(paused.get("stasis_local_pause_bytes", &[]), 0.0);
    // The pause snapshot is in the store: raw holds the 2 MB written, and the
    // stored (compressed, encrypted) bytes are there too.
    let raw = paused.get(
        "stasis_snapshot_bytes",
        &[("tenant", "t-default"), ("kind", "raw")],
    );
    let stored = paused.get(
        "stasis_snapshot_bytes",
        &[("tenant", "t-default"), ("kind", "stored")],
    );
    assert!(raw >= 2_000_000.0, "raw {raw}");
    assert!(
        stored >= 2_000_000.0,
        "random data does not compress: {stored}"
    );
    assert_eq!(
        paused.get("stasis_snapshots", &[("tenant", "t-default")]),
        1.0
    );

    h.ok("POST", &format!("/v1/sandboxes/{id}/resume"), None)
        .await;
    h.ok("DELETE", &format!("/v1/sandboxes/{id}"), None).await;
    // A refused operation counts as an error of that operation.
    let r = h
        .call(
            "POST",
            &format!("/v1/sandboxes/{id}/pause"),
            Some(json!({})),
        )
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
    let r = h.call("GET", "/v1/sandboxes/sb-doesnotexist", None).await;
    assert_eq!(r.status, 404);
    let r = h.call("GET", "/no/such/endpoint", None).await;
    assert_eq!(r.status, 404);
    // Without credentials: refused, and counted.
    let r = reqwest::get(format!("{}/v1/sandboxes", d.url))
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    let after = scrape(&d).await;
    for (op, ok, err) in [
        ("create", 1.0, 0.0),
        ("pause", 1.0, 1.0),
        ("resume", 1.0, 0.0),
        ("restore", 0.0, 0.0),
        ("snapshot", 0.0, 0.0),
        ("destroy", 1.0, 0.0),
    ] {
        assert_eq!(after.ops(op, "ok"), ok, "{op} ok");
        assert_eq!(after.ops(op, "error"), err, "{op} error");
    }
    for st in [
        "creating", "running", "pausing", "paused", "resuming", "failed",
    ] {
        assert_eq!(after.sandboxes(st), 0.0, "{st}");
    }
    // Destroy deleted the pause snapshot.
    assert_eq!(
        after.get("stasis_snapshots", &[("tenant", "t-default")]),
        0.0
    );
    // No reaper action happened.
    assert_eq!(
        after.get("stasis_idle_window_hits_total", &[("action", "pause")]),
        0.0
    );
    assert_eq!(after.get("stasis_ttl_expiries_total", &[]), 0.0);
    // HTTP requests by route template and status.
    assert_eq!(after.http("POST", "/v1/sandboxes", "201"), 1.0);
    assert_eq!(after.http("POST", "/v1/sandboxes/{id}/exec", "200"), 1.0);
    assert_eq!(after.http("POST", "/v1/sandboxes/{id}/pause", "200"), 1.0);
    assert_eq!(after.http("POST", "/v1/sandboxes/{id}/pause", "409"), 1.0);
    assert_eq!(after.http("POST", "/v1/sandboxes/{id}/resume", "200"), 1.0);
    assert_eq!(after.http("DELETE", "/v1/sandboxes/{id}", "200"), 1.0);
    assert_eq!(after.http("GET", "/v1/sandboxes/{id}", "404"), 1.0);
    assert_eq!(after.http("GET", "unmatched", "404"), 1.0);
    assert_eq!(after.http("GET", "/v1/sandboxes", "401"), 1.0);
    // Three scrapes answered before this one.
    assert_eq!(after.http("GET", "/metrics", "200"), 3.0);
    assert!(
        !after
            .samples
            .iter()
            .any(|s| s.labels.values().any(|v| v.contains("sb-"))),
        "a sandbox id leaked into a label"
    );
}

#[tokio::test]
async fn reaper_actions_are_counted() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    // Paused after 1 s idle, destroyed 1 s after that: one idle-window hit,
    // one TTL expiry.
    let idle = h
        .create(json!({"backend": "process",
            "lifecycle": {"idle_timeout_secs": 1, "on_idle": "pause", "paused_ttl_secs": 1}}))
        .await;
    // Destroyed when its running time reaches 1 s.
    let short = h
        .create(json!({"backend": "process",
            "lifecycle": {"on_idle": "nothing", "max_lifetime_secs": 1}}))
        .await;
    // Destroyed after 1 s idle.
    let gone = h
        .create(json!({"backend": "process",
            "lifecycle": {"idle_timeout_secs": 1, "on_idle": "destroy"}}))
        .await;
    for id in [&idle, &short, &gone] {
        h.wait_state(id, "destroyed", Duration::from_secs(60)).await;
    }
    let m = scrape(&d).await;
    assert_eq!(
        m.get("stasis_idle_window_hits_total", &[("action", "pause")]),
        1.0
    );
    assert_eq!(
        m.get("stasis_idle_window_hits_total", &[("action", "destroy")]),
        1.0
    );
    assert_eq!(
        m.get(
            "stasis_idle_window_hits_total",
            &[("action", "pause_filesystem")]
        ),
        0.0
    );
    assert_eq!(m.get("stasis_ttl_expiries_total", &[]), 1.0);
    assert_eq!(m.get("stasis_lifetime_expiries_total", &[]), 1.0);
    assert_eq!(m.ops("create", "ok"), 3.0);
    assert_eq!(m.ops("pause", "ok"), 1.0);
    assert_eq!(m.ops("destroy", "ok"), 3.0);
    assert_eq!(m.ops("resume", "ok"), 0.0);
    assert_eq!(m.sandboxes("running"), 0.0);
    assert_eq!(m.sandboxes("paused"), 0.0);
}

#[test]
fn the_strict_reader_refuses_malformed_text() {
    let good = "# HELP a_total x\n# TYPE a_total counter\na_total{k=\"v\\\"w\"} 1\n";
    assert_eq!(parse(good).get("a_total", &[("k", "v\"w")]), 1.0);
    for bad in [
        "a_total 1\n",                     // no TYPE
        "# TYPE a counter\na{k=v} 1\n",    // unquoted
        "# TYPE a counter\na{k=\"v\"}1\n", // no space
        "# TYPE a counter\na one\n",       // bad value
        "# TYPE a counter\n1a 1\n",        // bad name
        "# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n", // not cumulative
        "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_count 3\n", // +Inf != count
        "# TYPE a counter\na 1",                                    // no final newline
    ] {
        assert!(
            std::panic::catch_unwind(|| parse(bad)).is_err(),
            "accepted {bad:?}"
        );
    }
}

// ----- stasis cost -------------------------------------------------------

fn stasis(args: &[&str]) -> std::process::Output {
    std::process::Command::new(common::BIN)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn cost_from_a_bench_report() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("bench.json");
    // Round figures: pause 1 s, resume 2 s, 1 GiB stored, nothing resident.
    let bench = json!({
        "backend": "microvm", "accelerator": "tcg",
        "median_ms": {"pause": 1000.0, "resume_to_first_exec": 2000.0},
        "paused": {"cpu_ms_per_s": 0.0, "host_rss_bytes": 0.0},
        "snapshot_bytes": {"raw": 4294967296.0, "stored": 1073741824.0},
    });
    std::fs::write(&f, bench.to_string()).unwrap();
    let fs = f.to_str().unwrap();
    let out = stasis(&[
        "cost",
        "--from",
        fs,
        "--json",
        "--burst-secs",
        "60",
        "--period-mins",
        "10",
        "--hours",
        "1",
        "--ram-gib",
        "2",
        "--vcpus",
        "1",
        "--idle-secs",
        "37",
        "--price-vcpu-second",
        "0.001",
        "--price-gib-second",
        "0.0005",
        "--price-storage-gib-month",
        "2.628",
        "--price-per-resume",
        "0.01",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // Always: 3600 x (0.001 + 2 x 0.0005) = 7.2. Pause on idle: 6 periods of
    // 2 + 60 + 37 + 1 = 100 s running -> 1.2, storage 1 GiB x 3600 s x 1e-6 =
    // 0.0036, 6 resumes x 0.01 = 0.06.
    let close = |a: &serde_json::Value, b: f64| (a.as_f64().unwrap() - b).abs() < 1e-9;
    assert!(close(&v["always_running"]["total"], 7.2), "{v}");
    assert!(close(&v["pause_on_idle"]["total"], 1.2636), "{v}");
    assert!(close(&v["ratio"], 7.2 / 1.2636), "{v}");
    assert!(close(&v["timing_bound"], 6.0), "{v}");
    assert_eq!(v["measured"]["backend"], "microvm");
    assert!(v["source"].as_str().unwrap().contains("bench.json"));

    // The human table.
    let out = stasis(&["cost", "--from", fs]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("always running") && text.contains("pause on idle"),
        "{text}"
    );

    // Bad input: one readable line, non-zero exit.
    for (args, needle) in [
        (vec!["cost", "--from", fs, "--burst-secs", "900"], "burst"),
        (vec!["cost", "--from", fs, "--ram-gib=-1"], "ram_gib"),
        (
            vec!["cost", "--from", "/nonexistent/bench.json"],
            "cannot read",
        ),
    ] {
        let out = stasis(&args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{err}");
    }
    std::fs::write(&f, "{\"backend\": \"process\"}").unwrap();
    let out = stasis(&["cost", "--from", fs]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("median_ms.pause"));
}

/// `stasis cost` measuring now: a short lifecycle bench on a temporary daemon.
#[test]
fn cost_measures_the_process_backend() {
    let out = stasis(&["cost", "--backend", "process", "--repeats", "1", "--json"]);
    assert!(
        out.status.success(),
        "{} {}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["source"], "measured now");
    assert_eq!(v["measured"]["backend"], "process");
    let m = &v["measured"];
    assert!(m["pause_secs"].as_f64().unwrap() > 0.0, "{v}");
    assert!(m["resume_secs"].as_f64().unwrap() > 0.0, "{v}");
    assert!(m["snapshot_stored_bytes"].as_f64().unwrap() > 0.0, "{v}");
    // The example profile is idle 95% of the time: pausing pays, but never
    // more than period / burst.
    assert!(v["pauses"] == true, "{v}");
    let ratio = v["ratio"].as_f64().unwrap();
    assert!(
        ratio > 1.0 && ratio <= v["ideal_ratio"].as_f64().unwrap(),
        "{v}"
    );
}
