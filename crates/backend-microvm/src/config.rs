//! Backend configuration: which QEMU and images to use, the accelerator
//! choice, the timeouts of boot, agent requests, migrations and the KVM
//! probe, RAM sharing, mount roots, the egress service and the jail.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use stasis_core::{Error, Result};

use crate::jail;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum AccelChoice {
    /// Probe KVM with a timed boot; TCG when it does not answer in time.
    #[default]
    Auto,
    Kvm,
    Tcg,
}

impl std::str::FromStr for AccelChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(AccelChoice::Auto),
            "kvm" => Ok(AccelChoice::Kvm),
            "tcg" => Ok(AccelChoice::Tcg),
            _ => Err(Error::invalid(format!(
                "accelerator {s:?}: expected auto, kvm or tcg"
            ))),
        }
    }
}

#[derive(Clone)]
pub struct MicrovmConfig {
    /// `qemu-system-x86_64` (looked up in PATH when relative).
    pub qemu: PathBuf,
    /// `qemu-img`.
    pub qemu_img: PathBuf,
    /// Images: `<images_dir>/<name>/{vmlinux,initrd.img,rootfs.qcow2,image.json}`.
    pub images_dir: PathBuf,
    /// The daemon's image store: a manifest's `sha256:<id>` image is
    /// `<image_store>/images/<hex>/guest/`.
    pub image_store: Option<PathBuf>,
    pub accel: AccelChoice,
    /// Cold boot until the agent answers `hello`.
    pub boot_timeout: Duration,
    /// Any agent request beyond its own wait (exec timeout, session read wait).
    pub agent_timeout: Duration,
    /// An outgoing or incoming migration (pause, snapshot, resume, restore).
    pub migration_timeout: Duration,
    /// The KVM probe boot.
    pub probe_timeout: Duration,
    /// Directory holding the sandbox directories; `cleanup_orphans` only
    /// touches QEMUs whose cwd is below it. When `None`, the parents of the
    /// sandbox dirs this backend has seen are used.
    pub base_dir: Option<PathBuf>,
    /// Give every guest that owns its RAM (cold boot, resume) a RAM file of
    /// its own in its sandbox directory (`memory-backend-file,share=on`): a
    /// pause saves only the device state (`x-ignore-shared`) and the file is
    /// the RAM, kept for a local resume and uploaded as it is; restores map
    /// a snapshot's RAM file copy-on-write (`share=off`), so forks share
    /// unchanged guest pages in the page cache. False: anonymous RAM, saved
    /// in the migration stream.
    pub shared_ram: bool,
    /// Host RAM that sandboxes in standby may hold together (bytes); past
    /// it, the one that entered standby first is released.
    pub standby_max_bytes: u64,
    /// TCG translation buffer per guest, MiB (None: QEMU's 1 GiB default).
    /// Bounds the per-sandbox code cache, the main private memory of a fork.
    pub tcg_tb_mb: Option<u32>,
    /// The same for a restored guest (a fork, mapping its snapshot's RAM
    /// copy-on-write; None: `tcg_tb_mb`). Its translation buffer is the
    /// largest memory a fork does not share with its siblings, but the
    /// buffer is only touched as code is translated: a fork that ran `true`
    /// holds ~20 MiB of it at 128 and at 32 alike, while a cap below what
    /// it runs flushes and retranslates (fork 16, debug build: at 16 MiB
    /// total PSS 2.34x one sandbox instead of 2.81x, but a child's first
    /// exec 266 ms instead of 37 and a repeated `python3 -c pass` 927 ms
    /// instead of 155; at 32 MiB 2.81x and 943 ms). So by default as
    /// booted guests.
    pub tcg_tb_mb_restore: Option<u32>,
    /// Host directories under which read-only mount sources may lie (the
    /// operator's `--allow-mount`); empty: every mount is refused.
    pub mount_roots: Vec<PathBuf>,
    /// `mkfs.ext4` (builds the read-only input disks).
    pub mkfs_ext4: PathBuf,
    /// The daemon's egress service. Every QEMU runs in a network namespace
    /// of its own with a NIC on user networking; the backend attaches that
    /// namespace here before the guest runs (see `net` for what the
    /// service must do there). `None`: the NIC is `restrict=on` and nothing
    /// the guest sends leaves QEMU (fail closed, whatever `network.allow`).
    pub egress: Option<Arc<dyn stasis_backend::Egress>>,
    /// Tests only: new guests boot without a NIC, as every guest without an
    /// allowlist did before snapshot format 3 (to make such snapshots).
    #[doc(hidden)]
    pub test_guests_without_nic: bool,
    /// Run every QEMU unprivileged in its own namespaces and minimal root
    /// under its seccomp filter (see `qemu_jail`); `None` runs it as the daemon's
    /// user with the host's view (only for a daemon that is not root).
    pub jail: Option<jail::JailConfig>,
}

impl MicrovmConfig {
    pub fn new(images_dir: impl Into<PathBuf>) -> Self {
        MicrovmConfig {
            qemu: "qemu-system-x86_64".into(),
            qemu_img: "qemu-img".into(),
            images_dir: images_dir.into(),
            image_store: None,
            accel: AccelChoice::Auto,
            boot_timeout: Duration::from_secs(90),
            agent_timeout: Duration::from_secs(30),
            migration_timeout: Duration::from_secs(120),
            probe_timeout: Duration::from_secs(20),
            base_dir: None,
            shared_ram: true,
            standby_max_bytes: 2 << 30,
            tcg_tb_mb: Some(128),
            tcg_tb_mb_restore: None,
            mount_roots: Vec::new(),
            mkfs_ext4: "mkfs.ext4".into(),
            egress: None,
            test_guests_without_nic: false,
            jail: Some(crate::qemu_jail::config()),
        }
    }
}

impl std::fmt::Debug for MicrovmConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MicrovmConfig")
            .field("qemu", &self.qemu)
            .field("qemu_img", &self.qemu_img)
            .field("images_dir", &self.images_dir)
            .field("accel", &self.accel)
            .field("boot_timeout", &self.boot_timeout)
            .field("agent_timeout", &self.agent_timeout)
            .field("migration_timeout", &self.migration_timeout)
            .field("probe_timeout", &self.probe_timeout)
            .field("base_dir", &self.base_dir)
            .field("shared_ram", &self.shared_ram)
            .field("standby_max_bytes", &self.standby_max_bytes)
            .field("tcg_tb_mb", &self.tcg_tb_mb)
            .field("tcg_tb_mb_restore", &self.tcg_tb_mb_restore)
            .field("mount_roots", &self.mount_roots)
            .field("mkfs_ext4", &self.mkfs_ext4)
            .field("egress", &self.egress.as_ref().map(|_| "attached"))
            .field("test_guests_without_nic", &self.test_guests_without_nic)
            .field("jail", &self.jail)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accel_choice_parses() {
        assert_eq!("tcg".parse::<AccelChoice>().unwrap(), AccelChoice::Tcg);
        assert!("xen".parse::<AccelChoice>().is_err());
    }
}
