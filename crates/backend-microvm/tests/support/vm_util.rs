//! Helpers of the VM tests: finding a sandbox's QEMUs, killing them when a
//! test ends (even by panic), the test's root directory, copying artifacts.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use stasis_backend_microvm::{qemu, MicrovmBackend};
use stasis_core::SandboxId;

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
