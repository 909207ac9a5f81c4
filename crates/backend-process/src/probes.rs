//! What the host can do for the process backend: the capabilities it
//! reports (with the reasons it is unavailable) and the `stasis doctor`
//! probe (cgroups, namespaces, overlayfs, seccomp, and a live try).

use std::path::Path;
use std::process::Stdio;

use stasis_backend::Capabilities;
use stasis_core::BackendKind;

use crate::cgroup::Cgroups;
use crate::config::ProcessConfig;
use crate::shim;

/// What the backend can do on this host with `cfg`, and why not when it cannot.
pub(crate) fn capabilities(
    cfg: &ProcessConfig,
    cgroups: &std::result::Result<Cgroups, String>,
) -> Capabilities {
    let mut reasons = Vec::new();
    if unsafe { libc::geteuid() } != 0 {
        reasons.push("the process backend needs root (namespaces, cgroups, overlayfs)".to_string());
    }
    if let Err(e) = cgroups {
        reasons.push(e.clone());
    }
    for ns in ["mnt", "pid", "net", "ipc", "uts"] {
        if !Path::new("/proc/self/ns").join(ns).exists() {
            reasons.push(format!("kernel lacks {ns} namespaces"));
        }
    }
    if !cfg.shim_program.exists() {
        reasons.push(format!(
            "shim program {} not found",
            cfg.shim_program.display()
        ));
    }
    let mut notes = vec![
        "pause freezes the sandbox's cgroup: CPU stops, memory stays resident; resume thaws and processes continue".to_string(),
        "processes cannot be restored into a new sandbox (restore, fork): this backend has no checkpointer (CRIU fails on this host), so only the filesystem comes back".to_string(),
        "each sandbox has a supervisor process that owns its init and sessions: processes, sessions and their buffered output survive a daemon restart (or upgrade) and are reattached".to_string(),
        "network: each sandbox has its own network namespace; with the daemon's egress service attached, a firewall inside it sends DNS to a per-sandbox resolver and every TCP connection to a per-sandbox proxy that admits names (checked again by TLS SNI / HTTP Host), wildcards and networks from network.allow minus network.deny and the operator's deny list (127.0.0.1:P = the host's loopback port P); other UDP, ICMP and IPv6 are dropped; nothing is added to the host's network".to_string(),
        "resources.disk_mb caps the writable layer: it lives on a per-sandbox sparse ext4 image, loop-mounted (ENOSPC inside the sandbox when full)".to_string(),
        "without an image, the lower layer is the host's root filesystem with only /usr, /bin, /sbin, /lib*, /etc, /opt, /var visible (host secrets and logs masked)".to_string(),
        "image names a root filesystem the operator registered as <images>/<name>/rootfs/ (never a host path)".to_string(),
        "seccomp denies mount, pivot_root, reboot, kexec, module loading, bpf, perf_event_open, keyrings, swap, open_by_handle_at, setns and namespace-creating clone/unshare (EPERM); dangerous capabilities are dropped".to_string(),
    ];
    match cgroups {
        Ok(c) => notes.push(format!(
            "cgroup {} in use (controllers: {})",
            c.version.as_str(),
            c.controllers().join(",")
        )),
        Err(e) => notes.push(format!("cgroups unusable: {e}")),
    }
    Capabilities {
        backend: BackendKind::Process,
        available: reasons.is_empty(),
        reason: if reasons.is_empty() {
            None
        } else {
            Some(reasons.join("; "))
        },
        pause_keeps_processes: true,
        pause_frees_memory: false,
        restore_keeps_processes: false,
        accelerator: None,
        notes,
    }
}

/// What this machine offers the process backend, for `stasis doctor`.
pub fn probe() -> serde_json::Value {
    use serde_json::json;
    let cg = match Cgroups::detect() {
        Ok(c) => json!({
            "usable": true,
            "version": c.version.as_str(),
            "controllers": c.controllers(),
            "hierarchies": c.hierarchies(),
        }),
        Err(e) => json!({"usable": false, "error": e}),
    };
    let mut ns = serde_json::Map::new();
    for n in ["mnt", "pid", "net", "ipc", "uts", "user", "cgroup"] {
        ns.insert(n.into(), json!(Path::new("/proc/self/ns").join(n).exists()));
    }
    let filesystems = std::fs::read_to_string("/proc/filesystems").unwrap_or_default();
    let overlay = filesystems
        .lines()
        .any(|l| l.trim_end().ends_with("overlay"));
    let seccomp_kernel = std::fs::read_to_string("/proc/self/status")
        .map(|s| s.lines().any(|l| l.starts_with("Seccomp:")))
        .unwrap_or(false);
    let seccomp_filter = shim::jail::seccomp_programs().map(|p| p.len());
    let root = unsafe { libc::geteuid() } == 0;
    let live = if root {
        live_probe()
    } else {
        Err("not root".into())
    };
    json!({
        "backend": "process",
        "root": root,
        "cgroup": cg,
        "namespaces": ns,
        "overlayfs": overlay,
        // A real try: new mount/pid/net/ipc/uts namespaces and an overlay
        // mount over the host's / (util-linux `unshare`, when installed).
        "live_check": match &live {
            Ok(()) => json!({"ok": true}),
            Err(e) => json!({"ok": false, "error": e}),
        },
        "seccomp": {
            "kernel": seccomp_kernel,
            "filter_builds": seccomp_filter.is_ok(),
            "error": seccomp_filter.err(),
            "denied_syscalls": shim::jail::denied_syscalls().iter().map(|(n, _)| *n).collect::<Vec<_>>(),
        },
        "available": root && cg["usable"] == json!(true) && overlay && seccomp_kernel && live.is_ok(),
    })
}

fn live_probe() -> std::result::Result<(), String> {
    let dir = std::env::temp_dir().join(format!("stasis-probe-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for d in ["upper", "work", "merged"] {
        std::fs::create_dir_all(dir.join(d)).map_err(|e| format!("mkdir: {e}"))?;
    }
    let script = format!(
        "mount --make-rprivate / && mount -t overlay overlay -o lowerdir=/,upperdir={0}/upper,workdir={0}/work {0}/merged && test -x {0}/merged/bin/sh",
        dir.display()
    );
    let out = std::process::Command::new("unshare")
        .args([
            "--mount", "--pid", "--net", "--ipc", "--uts", "--fork", "sh", "-c", &script,
        ])
        .stdin(Stdio::null())
        .output();
    let _ = std::fs::remove_dir_all(&dir);
    match out {
        Err(e) => Err(format!("run unshare: {e}")),
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "unshare + overlay failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
    }
}
