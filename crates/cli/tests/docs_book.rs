//! The book under docs/ kept true to the binary: the HTTP API chapter is
//! generated from the daemon's `/openapi.json` (and a stale committed copy
//! fails), and every `sh` block of the quickstart chapter runs, in order, as
//! one shell script against the built `stasis`.
//!
//! Regenerate the API chapter after an API change:
//! `STASIS_BLESS_DOCS=1 cargo test -p stasis-cli --test docs_book api_chapter`.

mod common;

use common::{Daemon, BIN};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn docs_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/src")
}

const METHODS: [&str; 7] = ["get", "put", "post", "delete", "patch", "head", "options"];

/// Markdown for the API chapter: every path of the document, grouped by its
/// resource (the path's first segment after `/v1`), each method with its
/// summary and the status codes it documents.
fn render_api(doc: &Value) -> String {
    let paths = doc["paths"].as_object().expect("openapi: paths object");
    let mut groups: BTreeMap<String, Vec<(String, String, &Value)>> = BTreeMap::new();
    for (path, item) in paths {
        for m in METHODS {
            if let Some(op) = item.get(m) {
                groups.entry(group_of(path)).or_default().push((
                    path.clone(),
                    m.to_uppercase(),
                    op,
                ));
            }
        }
    }
    let ops: usize = groups.values().map(Vec::len).sum();
    let mut out = String::new();
    out.push_str("# HTTP API routes\n\n");
    out.push_str(
        "<!-- Generated from the daemon's /openapi.json by crates/cli/tests/docs_book.rs: \
         do not edit by hand. Regenerate with \
         `STASIS_BLESS_DOCS=1 cargo test -p stasis-cli --test docs_book api_chapter`. -->\n\n",
    );
    let version = doc["openapi"].as_str().unwrap_or("?");
    writeln!(
        out,
        "Every route the daemon documents in its OpenAPI {version} document \
         (`GET /openapi.json`): {ops} operations on {} paths, grouped by resource. \
         Request and response bodies are in the document itself; \
         [HTTP API conventions](api-overview.md) describes authentication, errors and paging.\n",
        paths.len()
    )
    .unwrap();
    for (group, rows) in &groups {
        writeln!(out, "## {group}\n").unwrap();
        out.push_str("| Method | Path | Summary | Status codes |\n|---|---|---|---|\n");
        for (path, method, op) in rows {
            writeln!(
                out,
                "| {method} | `{path}` | {} | {} |",
                cell(&summary_of(op)),
                cell(&statuses_of(op))
            )
            .unwrap();
        }
        out.push('\n');
    }
    out.truncate(out.trim_end().len());
    out.push('\n');
    out
}

fn group_of(path: &str) -> String {
    let mut seg = path.trim_start_matches('/').split('/');
    match (seg.next(), seg.next()) {
        (Some("v1"), Some("admin")) => "admin".to_string(),
        (Some("v1"), Some(s)) if !s.is_empty() => s.to_string(),
        (Some(s), _) if !s.is_empty() => s.to_string(),
        _ => "other".to_string(),
    }
}

fn summary_of(op: &Value) -> String {
    let text = op["summary"]
        .as_str()
        .filter(|s| !s.trim().is_empty())
        .or_else(|| op["description"].as_str())
        .unwrap_or("");
    text.lines().next().unwrap_or("").trim().to_string()
}

fn statuses_of(op: &Value) -> String {
    let Some(resp) = op["responses"].as_object() else {
        return String::new();
    };
    let mut codes: Vec<(&String, &Value)> = resp.iter().collect();
    codes.sort_by(|a, b| a.0.cmp(b.0));
    codes
        .iter()
        .map(|(code, r)| match r["description"].as_str().map(str::trim) {
            Some(d) if !d.is_empty() => format!("{code} {}", d.lines().next().unwrap_or("")),
            _ => code.to_string(),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// One table cell: no pipes or line breaks from the document's text.
fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

#[tokio::test]
async fn api_chapter_matches_openapi() {
    let d = Daemon::start(&[]).await;
    let doc: Value = reqwest::get(format!("{}/openapi.json", d.url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rendered = render_api(&doc);
    let file = docs_src().join("api.md");
    if std::env::var_os("STASIS_BLESS_DOCS").is_some() {
        std::fs::write(&file, &rendered).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        committed == rendered,
        "docs/src/api.md is stale against /openapi.json; regenerate it with \
         `STASIS_BLESS_DOCS=1 cargo test -p stasis-cli --test docs_book api_chapter` \
         (first differing line: {:?})",
        committed
            .lines()
            .zip(rendered.lines())
            .find(|(a, b)| a != b)
            .or(Some(("<end of one>", "")))
    );
}

#[test]
fn api_rendering_lists_every_operation_and_status() {
    let doc = serde_json::json!({
        "openapi": "3.1.0",
        "paths": {
            "/v1/sandboxes/{id}": {
                "get": {"summary": "Show | one", "responses": {"404": {"description": "Not found"}, "200": {"description": "The sandbox"}}},
                "delete": {"description": "Destroy it\nand more", "responses": {"204": {"description": ""}}}
            },
            "/v1/admin/tenants": {"post": {"summary": "Create a tenant", "responses": {}}},
            "/healthz": {"get": {"responses": {"200": {"description": "ok"}}}}
        }
    });
    let md = render_api(&doc);
    assert!(md.contains("4 operations on 3 paths"), "{md}");
    assert!(
        md.contains(
            "| GET | `/v1/sandboxes/{id}` | Show \\| one | 200 The sandbox; 404 Not found |"
        ),
        "{md}"
    );
    assert!(
        md.contains("| DELETE | `/v1/sandboxes/{id}` | Destroy it | 204 |"),
        "{md}"
    );
    assert!(md.contains("## admin\n"), "{md}");
    assert!(md.contains("## healthz\n"), "{md}");
    assert!(md.contains("## sandboxes\n"), "{md}");
}

/// The `sh` blocks of a Markdown text, in order (blocks of other
/// languages are skipped whole).
fn sh_blocks(md: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    // Inside a fence: Some(true) an sh block, Some(false) another language.
    let mut fence: Option<bool> = None;
    let mut cur = String::new();
    for line in md.lines() {
        let is_fence = line.trim_start().starts_with("```");
        match fence {
            None if is_fence => {
                let info = line.trim_start().trim_start_matches('`').trim();
                fence = Some(info.split([',', ' ']).next() == Some("sh"));
            }
            None => {}
            Some(sh) if is_fence => {
                if sh {
                    blocks.push(std::mem::take(&mut cur));
                }
                fence = None;
            }
            Some(true) => {
                cur.push_str(line);
                cur.push('\n');
            }
            Some(false) => {}
        }
    }
    blocks
}

#[test]
fn sh_blocks_are_found_in_order() {
    let md = "x\n```sh\necho 1\n```\n```json\n{}\n```\n```sh,ignore\necho 2\n```\n```python\nprint(3)\n```\n";
    assert_eq!(sh_blocks(md), vec!["echo 1\n", "echo 2\n"]);
}

/// Everything a failed run leaves behind: sandboxes the script made are
/// destroyed through the daemon it started, then its process group is killed.
fn clean_up(tmp: &Path, pgid: i32) {
    let dirs = std::fs::read_dir(tmp).into_iter().flatten().flatten();
    for dir in dirs.map(|e| e.path()) {
        let Ok(addr) = std::fs::read_to_string(dir.join("addr")) else {
            continue;
        };
        let cli = |args: &[&str]| {
            Command::new(BIN)
                .args(["--url", &format!("http://{}", addr.trim())])
                .env("STASIS_DATA_DIR", &dir)
                .env_remove("STASIS_TOKEN")
                .args(args)
                .output()
        };
        if let Ok(out) = cli(&["--json", "ls"]) {
            let v: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            for s in v.as_array().into_iter().flatten() {
                if let Some(id) = s["id"].as_str() {
                    let _ = cli(&["rm", id]);
                }
            }
        }
    }
    unsafe { libc::kill(-pgid, libc::SIGKILL) };
}

#[test]
fn quickstart_runs_as_written() {
    let md = std::fs::read_to_string(docs_src().join("quickstart.md")).unwrap();
    let blocks = sh_blocks(&md);
    assert!(blocks.len() >= 4, "the quickstart has its sh blocks");
    let tmp = tempfile::Builder::new()
        .prefix("stasis-quickstart-")
        .tempdir()
        .unwrap();
    let work = tmp.path().join("work");
    let tmpdir = tmp.path().join("tmp");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&tmpdir).unwrap();
    let script = format!("set -euo pipefail\nset -x\n{}", blocks.concat());
    let bin_dir = Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(&work)
        .env("PATH", path)
        .env("TMPDIR", &tmpdir)
        .env_remove("STASIS_URL")
        .env_remove("STASIS_TOKEN")
        .env_remove("STASIS_DATA_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("bash");
    let pgid = child.id() as i32;
    // A hang guard, not a timing assertion: a quickstart that never finishes
    // (a daemon that never becomes ready, a session that lost its variable)
    // fails with the script's trace instead of eating CI's time.
    let out_pipe = child.stdout.take().unwrap();
    let err_pipe = child.stderr.take().unwrap();
    let out_t = std::thread::spawn(move || std::io::read_to_string(out_pipe).unwrap_or_default());
    let err_t = std::thread::spawn(move || std::io::read_to_string(err_pipe).unwrap_or_default());
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break Some(st);
        }
        if Instant::now() > deadline {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    clean_up(&tmpdir, pgid);
    let _ = child.wait();
    let stdout = out_t.join().unwrap();
    let stderr = err_t.join().unwrap();
    let daemon_log = std::fs::read_dir(&tmpdir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("daemon.log")).ok())
        .collect::<String>();
    let report = format!(
        "stdout:\n{stdout}\nstderr (the script's trace):\n{stderr}\ndaemon log (tail):\n{}",
        tail(&daemon_log, 40)
    );
    match status {
        None => panic!("the quickstart did not finish within 300 s\n{report}"),
        Some(st) => assert!(st.success(), "the quickstart failed ({st})\n{report}"),
    }
    // What the chapter says the commands print.
    let lines: Vec<&str> = stdout.lines().map(str::trim).collect();
    assert!(lines.contains(&"42"), "exec printed 42\n{report}");
    assert!(
        lines.iter().filter(|l| **l == "city,temp").count() >= 2,
        "the file was read in the sandbox and in its restored copy\n{report}"
    );
    assert!(
        lines.contains(&"x = 42"),
        "the interpreter kept its variable across the pause\n{report}"
    );
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
