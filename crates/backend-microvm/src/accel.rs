//! The accelerator: KVM when a timed boot of the default image answers under
//! it, TCG otherwise (or as configured). The KVM findings on the development
//! hosts that motivate the probe are in this crate's README.md.
//!
//! A memory state is only loadable by the same accelerator/CPU model, so
//! `meta.json` records the accelerator and resume/restore use the recorded one.

use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Instant;

use stasis_core::{Error, Result};

use crate::agent;
use crate::config::{AccelChoice, MicrovmConfig};
use crate::disk::qemu_img;
use crate::image::{kernel_append, Image};
use crate::qemu::{self, Accel, RamBacking};

/// Result of the accelerator probe (also the doctor report's accelerator part).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccelReport {
    pub accelerator: Accel,
    /// Whether a KVM boot was actually attempted.
    pub probed: bool,
    /// Milliseconds until the agent answered under KVM (when it did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvm_boot_ms: Option<u64>,
    pub reason: String,
}

/// The host's KVM is PVM (software virtualization with shadow paging).
pub fn kvm_is_pvm() -> bool {
    Path::new("/sys/module/kvm_pvm").exists()
}

/// Boot the default image under KVM and see whether the agent answers within
/// `config.probe_timeout`. Honors `config.accel` (kvm/tcg skip the probe).
pub async fn probe_accelerator(config: &MicrovmConfig) -> AccelReport {
    match config.accel {
        AccelChoice::Tcg => {
            return AccelReport {
                accelerator: Accel::Tcg,
                probed: false,
                kvm_boot_ms: None,
                reason: "configured: tcg".into(),
            }
        }
        AccelChoice::Kvm => {
            return AccelReport {
                accelerator: Accel::Kvm,
                probed: false,
                kvm_boot_ms: None,
                reason: "configured: kvm".into(),
            }
        }
        AccelChoice::Auto => {}
    }
    let tcg = |reason: String| AccelReport {
        accelerator: Accel::Tcg,
        probed: true,
        kvm_boot_ms: None,
        reason,
    };
    if std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_err()
    {
        return tcg("/dev/kvm cannot be opened".into());
    }
    let image = match Image::resolve(&config.images_dir, None) {
        Ok(i) => i,
        Err(e) => return tcg(format!("no image to probe KVM with: {}", e.message)),
    };
    let tmp = std::env::temp_dir().join(format!(
        "stasis-kvm-probe-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    let _ = std::fs::remove_dir_all(&tmp);
    if let Err(e) = std::fs::create_dir_all(&tmp) {
        return tcg(format!("probe dir: {e}"));
    }
    let t0 = Instant::now();
    let r: Result<()> = async {
        let disk_backing = image.rootfs().display().to_string();
        qemu_img(
            &config.qemu_img,
            &tmp,
            &[
                "create",
                "-q",
                "-f",
                "qcow2",
                "-b",
                &disk_backing,
                "-F",
                "qcow2",
                qemu::DISK,
            ],
        )
        .await?;
        let launch = qemu::Launch {
            qemu: config.qemu.clone(),
            name: "kvm-probe".into(),
            accel: Accel::Kvm,
            memory_mb: 256,
            vcpus: 1,
            kernel: image.vmlinux(),
            initrd: image.initrd(),
            append: kernel_append(Accel::Kvm, &image),
            incoming: None,
            paused: false,
            ram: RamBacking::Anonymous,
            tcg_tb_mb: None,
            nic: crate::net::Nic::None,
            inputs: Vec::new(),
            seccomp: config.jail.is_some(),
        };
        let jail = match &config.jail {
            Some(cfg) => Some(qemu::prepare_jail(cfg, &launch, &tmp, &image.dir)?),
            None => None,
        };
        let mut proc = qemu::QemuProc::spawn(&launch, &tmp, jail.as_ref().map(|j| &j.1))?;
        drop(jail);
        let r = agent::connect_agent(&tmp.join(qemu::AGENT_SOCK), &mut proc, config.probe_timeout)
            .await;
        let alive = proc.alive();
        proc.kill().await;
        r.map(|_| ())
            .map_err(|e| Error::backend(format!("{}{}", e.message, qemu::diagnostics(&tmp, alive))))
    }
    .await;
    let _ = std::fs::remove_dir_all(&tmp);
    match r {
        Ok(()) => AccelReport {
            accelerator: Accel::Kvm,
            probed: true,
            kvm_boot_ms: Some(t0.elapsed().as_millis() as u64),
            reason: "guest agent answered under KVM".into(),
        },
        Err(e) => tcg(format!(
            "KVM boot probe failed after {} ms: {}{}",
            t0.elapsed().as_millis(),
            e.message,
            if kvm_is_pvm() {
                " (host /dev/kvm is kvm_pvm: shadow paging without VMX/SVM; unmodified guest kernels crawl)"
            } else {
                ""
            }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn tcg_config_skips_the_probe() {
        let mut c = MicrovmConfig::new("/nonexistent");
        c.accel = AccelChoice::Tcg;
        let r = probe_accelerator(&c).await;
        assert_eq!(r.accelerator, Accel::Tcg);
        assert!(!r.probed);
    }

    #[tokio::test]
    async fn auto_without_image_falls_back_to_tcg() {
        let c = MicrovmConfig::new("/nonexistent");
        let r = probe_accelerator(&c).await;
        assert_eq!(r.accelerator, Accel::Tcg);
    }
}
