//! The guest configuration a sandbox's guest last applied (`Configure`),
//! recorded by the daemon in the sandbox directory, so that a local resume
//! (the very guest that paused, its RAM as it was) skips re-applying a
//! configuration it already has: under TCG that request runs several
//! processes in the guest (`ip` for the NIC, the relays, resolv.conf), the
//! largest part of a resume's agent work.
//!
//! The record is removed before every `Configure` and written after it
//! succeeded, so it never names a configuration the guest may not have (a
//! daemon that dies in between leaves none: the next resume configures).
//! What it saves is only convenience inside the guest: every boundary that
//! holds against the guest (the egress policy, disk and memory caps) is
//! enforced on the host, whatever the guest's own settings. Still, a record
//! not owned by the daemon (one a jailed QEMU might plant in the directory
//! it may write) is ignored.

use std::path::Path;

use stasis_agent_proto::GuestConfig;

use stasis_core::Result;

use crate::boundary;
use crate::guest;
use crate::state::{MicrovmBackend, Vm};

/// In the sandbox directory.
pub(crate) const RECORD: &str = "guest-config.json";

/// The configuration `vm`'s guest should have, as recorded (no input to
/// refresh, the root filesystem not grown again).
pub(crate) fn wanted(vm: &Vm) -> GuestConfig {
    boundary::guest_config(&vm.manifest, &vm.inputs, &[], false, vm.nic)
}

/// Whether the guest is recorded to have applied `want` already.
pub(crate) fn has(dir: &Path, want: &GuestConfig) -> bool {
    use std::os::unix::fs::MetadataExt;
    let p = dir.join(RECORD);
    let Ok(md) = std::fs::symlink_metadata(&p) else {
        return false;
    };
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !md.file_type().is_file() || md.uid() != me || md.len() > 1 << 20 {
        return false;
    }
    std::fs::read(&p)
        .ok()
        .and_then(|b| serde_json::from_slice::<GuestConfig>(&b).ok())
        .is_some_and(|got| &got == want)
}

/// Forget the record (before a `Configure`, whose outcome is unknown
/// until it answers).
pub(crate) fn forget(dir: &Path) {
    let _ = stasis_backend::fsafe::remove_nofollow(&dir.join(RECORD));
}

/// Record that the guest applied `config` (best effort: without a record
/// the next resume configures again).
pub(crate) fn record(dir: &Path, config: &GuestConfig) {
    let Ok(bytes) = serde_json::to_vec(config) else {
        return;
    };
    if let Err(e) = stasis_backend::fsafe::write_replace(&dir.join(RECORD), &bytes, 0o644) {
        tracing::warn!(dir = %dir.display(), "cannot record the guest configuration: {e}");
    }
}

/// A cold-booted guest's first configuration (`guest::after_cold_boot`),
/// recorded.
pub(crate) async fn cold_configure(b: &MicrovmBackend, vm: &Vm) -> Result<()> {
    forget(&vm.dir);
    guest::after_cold_boot(b, vm).await?;
    record(&vm.dir, &wanted(vm));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_configuration_is_known_until_forgotten() {
        let d = tempfile::tempdir().unwrap();
        let c = GuestConfig {
            pids: 64,
            ..Default::default()
        };
        assert!(!has(d.path(), &c), "nothing recorded");
        record(d.path(), &c);
        assert!(has(d.path(), &c));
        let other = GuestConfig {
            pids: 65,
            ..Default::default()
        };
        assert!(!has(d.path(), &other), "another configuration");
        forget(d.path());
        assert!(!has(d.path(), &c), "forgotten");
        // A symlink planted under the name is not followed.
        let real = d.path().join("elsewhere");
        std::fs::write(&real, serde_json::to_vec(&c).unwrap()).unwrap();
        std::os::unix::fs::symlink(&real, d.path().join(RECORD)).unwrap();
        assert!(!has(d.path(), &c));
    }
}
