//! One command run to completion in a sandbox (`exec`): its environment
//! and working directory (shared with sessions), its own cgroup leaf, the
//! shim in `exec` mode, captured or streamed output, the timeout that kills
//! the leaf's whole tree, and the outcome the shim reports.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

use stasis_backend::ExecChunk;
use stasis_core::{Error, ExecRequest, ExecResult, Result, Stream};

use crate::config::ProcessConfig;
use crate::fsops;
use crate::launch::{config_memfd, drain, shim_exec_command};
use crate::sandbox::Sandbox;
use crate::shim_proto::{ExecConfig, ExecStatus};
use crate::sys::blocking;

fn default_env() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    m.insert(
        "PATH".into(),
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
    );
    m.insert("HOME".into(), "/root".into());
    m.insert("LANG".into(), "C.UTF-8".into());
    m
}

fn merge_env(
    manifest: &BTreeMap<String, String>,
    req: &BTreeMap<String, String>,
    user: Option<&str>,
) -> Result<Vec<(String, String)>> {
    stasis_core::exec::check_env(req)?;
    let mut defaults = default_env();
    if user.is_some() {
        // The shim takes HOME from the user's passwd entry.
        defaults.remove("HOME");
    }
    let env = stasis_core::exec::merge_env([&defaults, manifest, req]);
    Ok(env.into_iter().collect())
}

/// The user of one exec or session: its own, else the manifest's; checked
/// here, resolved by the shim inside the sandbox.
pub(crate) fn command_user(sb: &Sandbox, user: Option<&str>) -> Result<Option<String>> {
    let user = user.or(sb.spec.manifest.user.as_deref());
    if let Some(u) = user {
        stasis_core::user::UserSpec::parse(u, "user")?;
    }
    Ok(user.map(str::to_string))
}

/// A command's checked environment (the defaults, the manifest's, then the
/// request's) and its working directory, normalized against the sandbox's
/// workdir: what an exec and a session both start from.
pub(crate) fn command_env_cwd(
    sb: &Sandbox,
    argv: &[String],
    env: &BTreeMap<String, String>,
    cwd: Option<&str>,
    user: Option<&str>,
) -> Result<(Vec<(String, String)>, String)> {
    stasis_core::exec::check_argv(argv)?;
    let env = merge_env(&sb.spec.manifest.env, env, user)?;
    let cwd = match cwd {
        Some(c) => fsops::normalize(sb.workdir(), c).map_err(|e| e.with_field("cwd"))?,
        None => sb.workdir().to_string(),
    };
    Ok((env, cwd))
}

/// Output captured from one stream, shared with its reader task so that what
/// was read survives aborting the task.
#[derive(Default)]
struct Capture {
    data: Vec<u8>,
    truncated: bool,
}

fn spawn_reader<R: AsyncRead + Unpin + Send + 'static>(
    mut r: R,
    stream: Stream,
    limit: usize,
    sink: Option<mpsc::Sender<ExecChunk>>,
    cap: Arc<Mutex<Capture>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match r.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if let Some(tx) = &sink {
                let _ = tx
                    .send(ExecChunk {
                        stream,
                        data: buf[..n].to_vec(),
                    })
                    .await;
                continue;
            }
            let mut c = cap.lock().unwrap();
            let room = limit.saturating_sub(c.data.len());
            if n > room {
                c.truncated = true;
            }
            let take = n.min(room);
            c.data.extend_from_slice(&buf[..take]);
        }
    })
}

/// Where one exec or session runs: its cgroup leaf and its shim files.
struct Prepared {
    leaf: String,
    /// The shim's config in an anonymous memory file (see [`config_memfd`]).
    cfg_fd: std::os::fd::OwnedFd,
    status_path: PathBuf,
}

/// Make the cgroup leaf of one exec or session and write the shim's config.
#[allow(clippy::too_many_arguments)]
async fn prepare_exec(
    sb: &Sandbox,
    leaf: String,
    init_pid: i32,
    argv: &[String],
    env: Vec<(String, String)>,
    cwd: String,
    merge_stderr: bool,
    user: Option<String>,
) -> Result<Prepared> {
    let cg = sb.cg.clone();
    let l2 = leaf.clone();
    let procs = blocking(move || cg.leaf(&l2)).await?;
    let run_dir = sb.spec.dir.join("run");
    let status_path = run_dir.join(format!("{leaf}.status"));
    let cfg = ExecConfig {
        cgroup_procs: procs,
        init_pid,
        argv: argv.to_vec(),
        env,
        cwd,
        status_path: status_path.clone(),
        merge_stderr,
        pty: false,
        init_cgroup: sb.init_cgroup_marker(),
        user,
    };
    let cfg_fd = config_memfd(&serde_json::to_vec(&cfg)?)?;
    Ok(Prepared {
        leaf,
        cfg_fd,
        status_path,
    })
}

/// The shim could not be started: undo `prepare_exec` and say why.
async fn spawn_failed(sb: &Sandbox, leaf: &str, e: std::io::Error) -> Error {
    sb.cg.remove_leaf(leaf);
    Error::backend(format!("spawn shim: {e}"))
}

/// Run `req` in the sandbox; `output` streams it instead of capturing it.
pub(crate) async fn exec(
    cfg: &ProcessConfig,
    sb: &Arc<Sandbox>,
    req: ExecRequest,
    output: Option<mpsc::Sender<ExecChunk>>,
) -> Result<ExecResult> {
    let user = command_user(sb, req.user.as_deref())?;
    let (env, cwd) = command_env_cwd(sb, &req.argv, &req.env, req.cwd.as_deref(), user.as_deref())?;
    let init_pid = sb.pid().await?;
    let Prepared {
        leaf,
        cfg_fd,
        status_path,
    } = prepare_exec(
        sb,
        format!("x{}", sb.next()),
        init_pid,
        &req.argv,
        env,
        cwd,
        false,
        user,
    )
    .await?;
    let start = Instant::now();
    let spawned = shim_exec_command(&cfg.shim_program, &cfg.shim_args, &cfg_fd)
        .stdin(if req.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => return Err(spawn_failed(sb, &leaf, e).await),
    };
    drop(cfg_fd);
    if let (Some(data), Some(mut stdin)) = (req.stdin.clone(), child.stdin.take()) {
        tokio::spawn(async move {
            let _ = stdin.write_all(&data).await;
            let _ = stdin.shutdown().await;
        });
    }
    let limit = cfg.capture_limit;
    let out_cap = Arc::new(Mutex::new(Capture::default()));
    let err_cap = Arc::new(Mutex::new(Capture::default()));
    let t_out = spawn_reader(
        child.stdout.take().unwrap(),
        Stream::Stdout,
        limit,
        output.clone(),
        out_cap.clone(),
    );
    let t_err = spawn_reader(
        child.stderr.take().unwrap(),
        Stream::Stderr,
        limit,
        output.clone(),
        err_cap.clone(),
    );
    let deadline =
        tokio::time::Instant::from_std(start) + Duration::from_millis(req.timeout_ms.max(1));
    let mut timed_out = false;
    let wait = match tokio::time::timeout_at(deadline, child.wait()).await {
        Ok(w) => w.ok(),
        Err(_) => {
            timed_out = true;
            let cg = sb.cg.clone();
            let l2 = leaf.clone();
            blocking(move || cg.kill(&l2)).await?;
            child.wait().await.ok()
        }
    };
    drain(&sb.cg, &leaf, vec![t_out, t_err]).await;
    let duration_ms = start.elapsed().as_millis() as u64;
    let status = tokio::fs::read(&status_path).await.ok();
    let _ = tokio::fs::remove_file(&status_path).await;
    sb.cg.remove_leaf(&leaf);
    let take = |c: &Arc<Mutex<Capture>>| std::mem::take(&mut *c.lock().unwrap());
    let out = take(&out_cap);
    let mut err = take(&err_cap);
    let mut res = ExecResult {
        exit_code: None,
        signal: None,
        stdout: out.data,
        stderr: Vec::new(),
        timed_out,
        truncated: out.truncated || err.truncated,
        duration_ms,
    };
    let status: Option<ExecStatus> = status.and_then(|s| serde_json::from_slice(&s).ok());
    match status {
        _ if timed_out => {}
        Some(ExecStatus::Exited(c)) => res.exit_code = Some(c),
        Some(ExecStatus::Signaled(s)) => res.signal = Some(s),
        Some(ExecStatus::Cwd(msg)) => {
            return Err(Error::invalid(msg).with_field("cwd"));
        }
        Some(ExecStatus::User(msg)) => {
            return Err(Error::invalid(msg).with_field("user"));
        }
        Some(ExecStatus::Exec(code, msg)) => {
            res.exit_code = Some(code);
            err.data
                .extend_from_slice(format!("stasis: {msg}\n").as_bytes());
            if let Some(tx) = &output {
                let _ = tx
                    .send(ExecChunk {
                        stream: Stream::Stderr,
                        data: format!("stasis: {msg}\n").into_bytes(),
                    })
                    .await;
            }
        }
        Some(ExecStatus::Setup(msg)) => {
            return Err(Error::backend(format!("exec setup: {msg}")));
        }
        None => {
            // The supervisor itself died (e.g. OOM-killed with the command).
            use std::os::unix::process::ExitStatusExt;
            res.signal = Some(wait.and_then(|w| w.signal()).unwrap_or(libc::SIGKILL));
        }
    }
    res.stderr = err.data;
    Ok(res)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn env_layers_defaults_then_manifest_then_request() {
        let manifest = map(&[("HOME", "/work"), ("A", "manifest")]);
        let req = map(&[("A", "request"), ("B", "b")]);
        let env: BTreeMap<_, _> = merge_env(&manifest, &req, None)
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(env["HOME"], "/work");
        assert_eq!(env["A"], "request");
        assert_eq!(env["B"], "b");
        assert_eq!(env["LANG"], "C.UTF-8");
        assert!(env["PATH"].contains("/usr/bin"));
        // A named user's HOME comes from its passwd entry (the shim), unless set.
        let env: BTreeMap<_, _> = merge_env(&BTreeMap::new(), &req, Some("app"))
            .unwrap()
            .into_iter()
            .collect();
        assert!(!env.contains_key("HOME"));
        let env: BTreeMap<_, _> = merge_env(&manifest, &req, Some("app"))
            .unwrap()
            .into_iter()
            .collect();
        assert_eq!(env["HOME"], "/work");
    }

    #[test]
    fn a_request_env_with_a_bad_name_is_refused() {
        let e = merge_env(&BTreeMap::new(), &map(&[("A=B", "x")]), None).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("env"));
    }
}
