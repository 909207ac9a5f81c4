//! Test harness: the real `stasis` binary as a daemon on a temp data dir,
//! driven over HTTP; can be SIGKILLed and restarted on the same data dir.
#![allow(dead_code)]

use serde_json::{json, Value};
use stasis_cli::daemon_proc::{serve_command_keyed, wait_ready, NotReady};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod archives;

pub const BIN: &str = env!("CARGO_BIN_EXE_stasis");

pub struct Daemon {
    pub child: Option<Child>,
    pub dir: PathBuf,
    pub url: String,
    pub cgroup_parent: String,
    /// On the default parent, which other daemons on the host share: only
    /// this daemon's own group (`<parent>/.daemon-<id>`) is cleaned at the end.
    shared_parent: bool,
    extra: Vec<String>,
    /// Environment of the next (re)start, e.g. `STASIS_FAILPOINT`.
    pub envs: Vec<(String, String)>,
    /// Master keys of the next (re)start (default: the insecure dev key).
    pub key_file: Option<PathBuf>,
    _tmp: Option<tempfile::TempDir>,
}

pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}-{}", std::process::id(), rand_suffix())
}

fn rand_suffix() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(Instant::now().elapsed().as_nanos());
    h.finish() % 1_000_000
}

impl Daemon {
    pub async fn start(extra: &[&str]) -> Daemon {
        Self::start_on(extra, None).await
    }

    /// A daemon on the default cgroup parent (no `--cgroup-parent`), as
    /// `stasis serve`, `stasis demo` and `stasis bench` run.
    pub async fn start_on_default_parent(extra: &[&str]) -> Daemon {
        Self::start_on(extra, Some("stasis")).await
    }

    async fn start_on(extra: &[&str], shared_parent: Option<&str>) -> Daemon {
        let tmp = tempfile::Builder::new()
            .prefix("stasis-it-")
            .tempdir()
            .unwrap();
        let dir = tmp.path().to_path_buf();
        let mut d = Daemon {
            child: None,
            dir,
            url: String::new(),
            cgroup_parent: shared_parent
                .map(String::from)
                .unwrap_or_else(|| unique("stasis-it")),
            shared_parent: shared_parent.is_some(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            envs: Vec::new(),
            key_file: None,
            _tmp: Some(tmp),
        };
        d.spawn().await;
        d
    }

    pub fn images_dir() -> Option<PathBuf> {
        std::env::var_os("STASIS_IMAGE_DIR").map(|d| {
            let p = PathBuf::from(d);
            // STASIS_IMAGE_DIR names one image ("default"); the daemon wants its parent.
            p.parent().map(Path::to_path_buf).unwrap_or(p)
        })
    }

    async fn spawn(&mut self) {
        let ready = self.dir.join("ready");
        let _ = std::fs::remove_file(&ready);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("daemon.log"))
            .unwrap();
        let mut cmd = serve_command_keyed(
            Path::new(BIN),
            &self.dir,
            &ready,
            log,
            self.key_file.as_deref(),
        )
        .unwrap();
        cmd.args(["--accel", "tcg"]);
        if !self.shared_parent {
            cmd.args(["--cgroup-parent", &self.cgroup_parent]);
        }
        if let Some(images) = Self::images_dir() {
            cmd.arg("--images").arg(images);
        }
        cmd.args(&self.extra)
            .envs(self.envs.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("RUST_LOG", "info");
        let mut child = cmd.spawn().expect("spawn stasis serve");
        match wait_ready(&mut child, &ready, Duration::from_secs(60)).await {
            Ok(addr) => self.url = format!("http://{addr}"),
            Err(NotReady::Exited(st)) => panic!("daemon exited {st}: {}", self.log()),
            Err(NotReady::TimedOut) => panic!("daemon did not start: {}", self.log()),
            Err(NotReady::Io(e)) => panic!("daemon: {e}"),
        }
        self.child = Some(child);
    }

    /// This daemon's own cgroup (`<parent>/.daemon-<id>`, the id from its
    /// data dir), once it has started.
    pub fn own_cgroup(&self) -> Option<String> {
        let id = std::fs::read_to_string(self.dir.join("daemon-id")).ok()?;
        Some(format!("{}/.daemon-{}", self.cgroup_parent, id.trim()))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("daemon.log")).unwrap_or_default()
    }

    /// SIGKILL the daemon (no cleanup of any kind runs).
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Serve flags for the next (re)start.
    pub fn set_extra(&mut self, extra: &[&str]) {
        self.extra = extra.iter().map(|s| s.to_string()).collect();
    }

    pub async fn restart(&mut self) {
        self.kill9();
        self.spawn().await;
    }

    /// Stop the daemon as an operator or Kubernetes does (SIGTERM), waiting
    /// up to `wait` for it to exit, then SIGKILL.
    pub fn stop(&mut self, wait: Duration) {
        if let Some(mut c) = self.child.take() {
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + wait;
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start the daemon again on its data dir after [`Daemon::stop`].
    pub async fn start_again(&mut self) {
        self.spawn().await;
    }

    /// The tenant token the daemon wrote at its first start (`<data>/token`).
    pub fn token(&self) -> String {
        std::fs::read_to_string(self.dir.join("token"))
            .expect("daemon wrote <data>/token")
            .trim()
            .to_string()
    }

    /// The admin token (`<data>/admin.token`).
    pub fn admin_token(&self) -> String {
        std::fs::read_to_string(self.dir.join("admin.token"))
            .expect("daemon wrote <data>/admin.token")
            .trim()
            .to_string()
    }

    /// An HTTP client that authenticates with `token`.
    pub fn client_with(token: &str) -> reqwest::Client {
        let mut h = reqwest::header::HeaderMap::new();
        h.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {token}").parse().unwrap(),
        );
        reqwest::Client::builder()
            .default_headers(h)
            .build()
            .unwrap()
    }

    /// An HTTP client that authenticates as the default tenant.
    pub fn client(&self) -> reqwest::Client {
        Self::client_with(&self.token())
    }

    pub fn http(&self) -> Http {
        Http {
            base: self.url.clone(),
            c: self.client(),
        }
    }

    /// The API as another caller (another tenant's token, an admin token, none).
    pub fn http_as(&self, token: Option<&str>) -> Http {
        Http {
            base: self.url.clone(),
            c: match token {
                Some(t) => Self::client_with(t),
                None => reqwest::Client::new(),
            },
        }
    }

    /// Run the CLI against this daemon.
    pub fn cli(&self, args: &[&str]) -> std::process::Output {
        // The CLI finds its token in the data dir named by STASIS_DATA_DIR.
        Command::new(BIN)
            .args(["--url", &self.url])
            .env_remove("STASIS_TOKEN")
            .env("STASIS_DATA_DIR", &self.dir)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .expect("run stasis")
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(5));
        // Leftover sandboxes of this test: destroy through a fresh daemon would
        // be slow; kill whatever sits in this test's cgroups instead.
        if self.shared_parent {
            if let Some(own) = self.own_cgroup() {
                cleanup_cgroups(&own);
            }
            unmount_under(&self.dir);
            return;
        }
        cleanup_cgroups(&self.cgroup_parent);
        unmount_under(&self.dir);
        // Host egress tables an earlier backend version may have left.
        stasis_backend_process::net::cleanup_legacy(&self.cgroup_parent);
    }
}

/// Detach every mount below `dir` (the process backend's per-sandbox quota
/// filesystems outlive a killed daemon, like its sandboxes do).
pub fn unmount_under(dir: &Path) {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<String> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| Path::new(m).starts_with(dir))
        .map(|m| m.to_string())
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in points {
        let c = std::ffi::CString::new(p).unwrap();
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

/// Kill and remove every cgroup under `parent` in every hierarchy.
pub fn cleanup_cgroups(parent: &str) {
    for root in cgroup_roots() {
        let p = root.join(parent);
        if !p.exists() {
            continue;
        }
        for _ in 0..50 {
            let mut any = false;
            for entry in walk(&p) {
                if let Ok(procs) = std::fs::read_to_string(entry.join("cgroup.procs")) {
                    for pid in procs.split_whitespace() {
                        any = true;
                        unsafe { libc::kill(pid.parse().unwrap_or(0), libc::SIGKILL) };
                    }
                }
                let _ = std::fs::write(entry.join("freezer.state"), "THAWED");
                let _ = std::fs::write(entry.join("cgroup.freeze"), "0");
            }
            if !any {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let mut dirs = walk(&p);
        dirs.reverse();
        for d in dirs {
            let _ = std::fs::remove_dir(d);
        }
    }
}

pub fn cgroup_roots() -> Vec<PathBuf> {
    let mut v = Vec::new();
    for c in [
        "memory",
        "pids",
        "cpu",
        "cpuacct",
        "freezer",
        "cpu,cpuacct",
        "unified",
        "systemd",
    ] {
        let p = PathBuf::from("/sys/fs/cgroup").join(c);
        if p.is_dir() {
            v.push(p);
        }
    }
    if PathBuf::from("/sys/fs/cgroup/cgroup.controllers").exists() {
        v.push(PathBuf::from("/sys/fs/cgroup"));
    }
    v
}

fn walk(p: &Path) -> Vec<PathBuf> {
    let mut out = vec![p.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        if let Ok(rd) = std::fs::read_dir(&out[i]) {
            for e in rd.flatten() {
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    out.push(e.path());
                }
            }
        }
        i += 1;
    }
    out
}

/// Every pid in the daemon's cgroups (any hierarchy).
pub fn pids_in_cgroups(parent: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for root in cgroup_roots() {
        let p = root.join(parent);
        for d in walk(&p) {
            if let Ok(s) = std::fs::read_to_string(d.join("cgroup.procs")) {
                pids.extend(s.split_whitespace().filter_map(|x| x.parse::<u32>().ok()));
            }
        }
    }
    pids.sort();
    pids.dedup();
    pids
}

pub struct Http {
    pub base: String,
    pub c: reqwest::Client,
}

pub struct Resp {
    pub status: u16,
    pub body: Value,
}

impl Http {
    pub async fn call(&self, method: &str, path: &str, body: Option<Value>) -> Resp {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let mut rb = self.c.request(m, format!("{}{}", self.base, path));
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        let r = rb.send().await.expect("request");
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Resp { status, body }
    }

    pub async fn raw(&self, method: &str, path: &str, body: Vec<u8>) -> Resp {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let r = self
            .c
            .request(m, format!("{}{}", self.base, path))
            .body(body)
            .send()
            .await
            .expect("request");
        let status = r.status().as_u16();
        let text = r.text().await.unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        Resp { status, body }
    }

    pub async fn ok(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let r = self.call(method, path, body).await;
        assert!(
            (200..300).contains(&r.status),
            "{method} {path} -> {}: {}",
            r.status,
            r.body
        );
        r.body
    }

    pub async fn create(&self, manifest: Value) -> String {
        let v = self
            .ok(
                "POST",
                "/v1/sandboxes",
                Some(json!({ "manifest": manifest })),
            )
            .await;
        v["id"].as_str().unwrap().to_string()
    }

    pub async fn exec(&self, id: &str, argv: &[&str]) -> Value {
        self.ok(
            "POST",
            &format!("/v1/sandboxes/{id}/exec"),
            Some(json!({"argv": argv, "timeout_ms": 60000})),
        )
        .await
    }

    pub async fn sh(&self, id: &str, script: &str) -> String {
        let v = self.exec(id, &["sh", "-c", script]).await;
        assert_eq!(v["exit_code"], 0, "{script}: {v}");
        v["stdout"].as_str().unwrap().to_string()
    }

    pub async fn state(&self, id: &str) -> Value {
        self.ok("GET", &format!("/v1/sandboxes/{id}"), None).await
    }

    pub async fn wait_state(&self, id: &str, state: &str, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let v = self.state(id).await;
            if v["state"] == state {
                return v;
            }
            assert!(Instant::now() < deadline, "{id} never became {state}: {v}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Start a session, send `input`, read until `needle`; returns (session, next offset).
    pub async fn session_until(
        &self,
        id: &str,
        session: &str,
        mut offset: u64,
        needle: &str,
    ) -> (String, u64) {
        let deadline = Instant::now() + Duration::from_secs(120);
        let mut text = String::new();
        loop {
            let v = self
                .ok(
                    "GET",
                    &format!(
                        "/v1/sandboxes/{id}/sessions/{session}/output?offset={offset}&wait_ms=1000"
                    ),
                    None,
                )
                .await;
            text.push_str(v["data"].as_str().unwrap_or(""));
            offset = v["next_offset"].as_u64().unwrap();
            if text.contains(needle) {
                return (text, offset);
            }
            assert!(
                Instant::now() < deadline,
                "never saw {needle:?}; got {text:?}"
            );
        }
    }

    /// Fork `count` children; returns their ids.
    pub async fn fork(&self, id: &str, count: u32) -> Vec<String> {
        let f = self
            .ok(
                "POST",
                &format!("/v1/sandboxes/{id}/fork"),
                Some(json!({ "count": count })),
            )
            .await;
        let kids: Vec<String> = f["sandboxes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(kids.len(), count as usize, "{f}");
        kids
    }

    pub async fn send(&self, id: &str, session: &str, data: &str) {
        self.ok(
            "POST",
            &format!("/v1/sandboxes/{id}/sessions/{session}/input"),
            Some(json!({"data": data})),
        )
        .await;
    }
}

// ----- additions for resume_correctness.rs (additive) -----------------------

impl Daemon {
    /// The last `n` lines of the daemon log (for failure reports).
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }
}

/// SIGKILL every QEMU whose working directory is under `dir` (microVM
/// sandboxes of a test daemon: QEMU runs in its own session with the sandbox
/// dir as cwd and survives the daemon).
pub fn kill_qemus_under(dir: &Path) {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in rd.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        if !comm.contains("qemu") {
            continue;
        }
        if let Ok(cwd) = std::fs::read_link(format!("/proc/{pid}/cwd")) {
            let cwd = PathBuf::from(cwd.to_string_lossy().trim_end_matches(" (deleted)"));
            if cwd.starts_with(&dir) {
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

impl Http {
    /// As the admin: a new tenant `id` and a fresh token for it (checked
    /// to have the token format: `stk_` and 43 base64url characters).
    pub async fn new_tenant(&self, id: &str) -> String {
        let t = self
            .ok(
                "POST",
                "/v1/admin/tenants",
                Some(json!({"id": id, "name": id})),
            )
            .await;
        assert_eq!(t["id"], id);
        self.new_token(id).await
    }

    /// As the admin: another token for the existing tenant `id`.
    pub async fn new_token(&self, id: &str) -> String {
        let tok = self
            .ok(
                "POST",
                &format!("/v1/admin/tenants/{id}/tokens"),
                Some(json!({"name": "test"})),
            )
            .await;
        let token = tok["token"].as_str().unwrap().to_string();
        assert!(
            token.starts_with("stk_") && token.len() == 4 + 43,
            "{token}"
        );
        token
    }
}

impl Http {
    /// A request whose response body is returned as raw bytes.
    pub async fn bytes(&self, method: &str, path: &str, body: Vec<u8>) -> (u16, Vec<u8>) {
        let m = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
        let r = self
            .c
            .request(m, format!("{}{}", self.base, path))
            .body(body)
            .send()
            .await
            .expect("request");
        let status = r.status().as_u16();
        (status, r.bytes().await.unwrap_or_default().to_vec())
    }
}

/// Whether `needle` occurs in `hay` (memmem: memory images are hundreds of MB).
pub fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && memchr::memmem::find(hay, needle).is_some()
}

/// Every regular file under `dir` (not following symlinks).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue;
        };
        if meta.is_dir() {
            if let Ok(rd) = std::fs::read_dir(&p) {
                stack.extend(rd.flatten().map(|e| e.path()));
            }
        } else if meta.is_file() {
            files.push(p);
        }
    }
    files
}

/// Every file under `dir` (not following symlinks) that contains `needle`.
pub fn files_containing(dir: &Path, needle: &[u8]) -> Vec<PathBuf> {
    files_under(dir)
        .into_iter()
        .filter(|p| std::fs::read(p).is_ok_and(|data| contains(&data, needle)))
        .collect()
}

/// Every snapshot of tenant `t-default` in a stopped test daemon's local
/// store, decrypted and restored into a temporary directory each, with
/// its record as JSON (for scanning what the store really holds).
pub async fn decrypted_snapshots(data_dir: &Path) -> Vec<(String, tempfile::TempDir)> {
    let store = stasis_store::Store::open(
        &format!("file://{}", data_dir.join("store").display()),
        stasis_store::MasterKey::insecure_dev(),
    )
    .await
    .unwrap();
    stasis_server::governance::use_data_dir_keks(&store, data_dir)
        .await
        .unwrap();
    let tenant = stasis_core::TenantId::parse("t-default").unwrap();
    let mut out = Vec::new();
    for r in store.list_snapshots(&tenant).await.unwrap() {
        let dir = tempfile::tempdir().unwrap();
        let rec = store
            .restore_snapshot(&tenant, &r.id, dir.path(), None)
            .await
            .unwrap();
        out.push((serde_json::to_string(&rec).unwrap(), dir));
    }
    out
}
