//! Helpers of the VM tests: finding a sandbox's QEMUs, killing them when a
//! test ends (even by panic), the test's root directory, copying artifacts.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use stasis_backend::{Backend, SandboxSpec};
use stasis_backend_microvm::{qemu, AccelChoice, MicrovmBackend, MicrovmConfig};
use stasis_core::{ExecRequest, ExecResult, Manifest, SandboxId};

/// The guest image directory (`STASIS_IMAGE_DIR`), or None after saying on
/// fd 2 that the `what` tests did not run.
pub fn image_dir(what: &str) -> Option<PathBuf> {
    match std::env::var_os("STASIS_IMAGE_DIR") {
        Some(d) if !d.is_empty() => Some(PathBuf::from(d)),
        _ => {
            // Straight to fd 2: libtest's capture would swallow eprintln!.
            let msg = format!(
                "stasis-backend-microvm: STASIS_IMAGE_DIR not set: microVM {what} tests NOT RUN\n"
            );
            // SAFETY: write to fd 2 from a valid buffer.
            unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
            None
        }
    }
}

/// A TCG backend on the image's parent directory (`STASIS_SHARED_RAM=0`
/// turns kept RAM images off).
pub fn backend(img: &Path, agent_timeout: Duration) -> MicrovmBackend {
    let mut c = MicrovmConfig::new(img.parent().unwrap());
    c.accel = AccelChoice::Tcg;
    c.agent_timeout = agent_timeout;
    c.boot_timeout = Duration::from_secs(120);
    if let Ok(v) = std::env::var("STASIS_SHARED_RAM") {
        c.shared_ram = v != "0";
    }
    MicrovmBackend::new(c)
}

/// A new sandbox of the image under `root`, its QEMUs reaped by `reaper`.
pub fn spec(root: &Path, img: &Path, reaper: &Reaper) -> SandboxSpec {
    let id = SandboxId::generate();
    let dir = root.join(id.as_str());
    std::fs::create_dir_all(&dir).unwrap();
    let manifest = Manifest {
        image: Some(img.display().to_string()),
        ..Default::default()
    };
    reaper.0.lock().unwrap().push(id.clone());
    SandboxSpec { id, manifest, dir }
}

pub fn qemus_of(id: &SandboxId) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .filter(|pid| {
            stasis_backend_microvm::util::pid_alive(*pid)
                && qemu::sandbox_of(*pid).as_deref() == Some(id.as_str())
        })
        .collect()
}

/// Kills the QEMUs of every sandbox a test made when it ends (even by panic).
pub struct Reaper(pub std::sync::Mutex<Vec<SandboxId>>);
impl Reaper {
    pub fn new() -> Self {
        Reaper(std::sync::Mutex::new(Vec::new()))
    }
}
impl Drop for Reaper {
    fn drop(&mut self) {
        for id in self.0.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            for pid in qemus_of(id) {
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

pub struct Root(pub PathBuf);
impl Root {
    pub fn path(&self) -> &Path {
        &self.0
    }
}

pub fn futures_rss(b: &MicrovmBackend, id: &SandboxId) -> u64 {
    b.qemu_pid(id)
        .map(stasis_backend_microvm::util::rss_bytes)
        .unwrap_or(0)
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

/// `sh -c cmd` in the guest; panics unless it ran and exited 0.
pub async fn sh_ok(b: &MicrovmBackend, id: &SandboxId, cmd: &str, timeout_ms: u64) -> ExecResult {
    let r = b
        .exec(
            id,
            ExecRequest {
                argv: vec!["sh".into(), "-c".into(), cmd.into()],
                env: Default::default(),
                cwd: None,
                timeout_ms,
                stdin: None,
                user: None,
            },
            None,
        )
        .await
        .unwrap_or_else(|e| panic!("exec {cmd:?}: {e}"));
    assert_eq!(
        r.exit_code,
        Some(0),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    r
}
