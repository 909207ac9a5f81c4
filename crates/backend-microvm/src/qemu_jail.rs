//! The jail of a sandbox's QEMU: what a QEMU opens, as a plan for the
//! generic jail (`stasis_jail`, after Firecracker's jailer). QEMU emulates
//! devices for untrusted guest code; a bug there must not give the guest
//! the host. Every QEMU therefore starts:
//!
//! * as an **unprivileged uid/gid of its own**, from a dedicated range
//!   ([`config`]: `0x7a000000` + 0..65535, above the ranges distributions
//!   and systemd hand out), leased for the life of that QEMU only (a
//!   resumed or forked sandbox gets a new one). No supplementary groups,
//!   except `/dev/kvm`'s group under KVM.
//! * in new mount, pid, ipc, uts, cgroup and **network** namespaces. The
//!   network namespace is QEMU's alone: the guest's user networking opens
//!   its sockets there, and the daemon's egress service polices it (see
//!   `net`). Pid 1 is the jail's reaping init (`stasis-jail`).
//! * with a **minimal root** of bind mounts at their host paths (so no
//!   argument or qcow2 backing reference needs rewriting): the QEMU binary
//!   and its shared libraries, the firmware, the kernel, the initrd, the
//!   backing chain of the disk (read-only), the sandbox directory
//!   (read-write), `/dev/{null,zero,random,urandom}` (and `/dev/kvm` under
//!   KVM). No `/etc` (so slirp's DNS forwarder finds no resolv.conf, see
//!   `net`), no `/proc`, no home, no other sandbox.
//! * under **QEMU's seccomp sandbox**: `-sandbox on,obsolete=deny,
//!   elevateprivileges=deny,spawn=deny,resourcecontrol=deny`, for every
//!   guest.
//!
//! Files: the sandbox directory becomes `root:<jail gid>` mode `01770`:
//! QEMU may create its sockets and console log there, but the sticky bit
//! keeps it from removing or replacing the daemon's files (`vm.json`,
//! `qemu.pid`); `disk.qcow2` is chowned to the jail uid. Everything else it
//! reads (backing files, RAM files, input disks) stays root-owned and
//! world-readable only. Migration streams never touch QEMU's filesystem: the
//! daemon opens `memory.state` and passes the descriptor over QMP (`getfd`,
//! `fd:` URIs), so QEMU needs no `exec:` (which `spawn=deny` forbids) and no
//! view of the snapshot directories. The daemon (root) still reaches the QMP
//! and agent sockets and `/proc/<pid>`.
//!
//! What QEMU writes is never trusted (`trust`): a backing file outside the
//! image's and the sandbox's directories is refused before it is opened,
//! bound or chmodded, and modes change only through `O_NOFOLLOW`
//! descriptors; disks are checked when they leave or enter a sandbox.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use stasis_core::{Error, Result};
use stasis_jail::{absolute, libraries, resolve_bin, Bind, JailConfig, JailSpec, DEVICES};

use crate::trust::backing_chain;

/// Where the jail's root tmpfs is mounted while it is built (inside the new
/// mount namespace only; on the host this stays an empty directory). The
/// name hosts already have, kept.
pub const STAGING: &str = "/run/stasis-qemu-jail";

/// The uid range QEMUs run under by default.
pub fn config() -> JailConfig {
    JailConfig {
        uid_base: stasis_backend::QEMU_JAIL_UID_BASE,
        uid_count: stasis_backend::QEMU_JAIL_UID_COUNT,
    }
}

/// What QEMU opens, gathered by the caller from the launch.
pub struct Needs<'a> {
    pub qemu: &'a Path,
    pub firmware: &'a str,
    pub kernel: &'a Path,
    pub initrd: &'a Path,
    /// The writable disk (relative to `dir` or absolute).
    pub disk: &'a Path,
    /// Read-only files (input disks, RAM files).
    pub files: Vec<PathBuf>,
    pub kvm: bool,
    pub dir: &'a Path,
    /// The image's directory: with `dir`, the only place a backing file may
    /// lie (the disk's header is QEMU-written, see `trust`).
    pub image_dir: &'a Path,
}

/// The firmware QEMU looks up by bare name in its data directory.
fn firmware_path(qemu: &Path, name: &str) -> Option<PathBuf> {
    let exe_rel = qemu
        .parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("share/qemu").join(name));
    exe_rel
        .into_iter()
        .chain([Path::new("/usr/share/qemu").join(name)])
        .find(|p| p.is_file())
}

/// What a QEMU with these needs sees, run as `uid`.
pub fn plan(uid: u32, n: &Needs) -> Result<JailSpec> {
    let dir = absolute(Path::new("/"), n.dir);
    let mut binds: Vec<Bind> = Vec::new();
    let qemu = resolve_bin(n.qemu)?;
    for l in libraries(&qemu)? {
        binds.push(Bind::file(l, true));
    }
    binds.push(Bind::file(qemu.clone(), true));
    if let Some(fw) = firmware_path(&qemu, n.firmware) {
        binds.push(Bind::file(fw, false));
    }
    binds.push(Bind::file(absolute(&dir, n.kernel), false));
    binds.push(Bind::file(absolute(&dir, n.initrd), false));
    // The chain comes from headers a previous QEMU may have written: a
    // backing file whose real path leaves the image or the sandbox
    // directory is refused (never bound, never chmodded).
    for b in backing_chain(&absolute(&dir, n.disk), &[n.image_dir, &dir])? {
        binds.push(Bind::file(b, false));
    }
    for f in &n.files {
        binds.push(Bind::file(absolute(&dir, f), false));
    }
    let mut groups = Vec::new();
    let mut devices: Vec<&str> = DEVICES.to_vec();
    if n.kvm {
        let md =
            std::fs::metadata("/dev/kvm").map_err(|e| Error::backend(format!("/dev/kvm: {e}")))?;
        if md.mode() & 0o060 != 0o060 || md.gid() == 0 {
            return Err(Error::backend(format!(
                "the jailed QEMU runs unprivileged and cannot open /dev/kvm (mode {:o}, gid {}): give it a group, e.g. `chgrp kvm /dev/kvm && chmod 660 /dev/kvm`",
                md.mode() & 0o777,
                md.gid()
            )));
        }
        groups.push(md.gid());
        devices.push("/dev/kvm");
    }
    binds.extend(devices.into_iter().map(|d| Bind::device(d.into())));
    JailSpec::new(Path::new(STAGING), uid, groups, &dir, binds)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::tests::qcow2;

    #[test]
    fn the_plan_binds_only_what_qemu_opens() {
        let d = tempfile::tempdir().unwrap();
        let sb = d.path().join("sb");
        let img = d.path().join("img");
        std::fs::create_dir_all(&sb).unwrap();
        std::fs::create_dir_all(&img).unwrap();
        for f in ["vmlinux", "initrd.img"] {
            std::fs::write(img.join(f), f).unwrap();
        }
        qcow2(&img.join("rootfs.qcow2"), "", None, None);
        qcow2(
            &sb.join("disk.qcow2"),
            img.join("rootfs.qcow2").to_str().unwrap(),
            None,
            None,
        );
        let kernel = img.join("vmlinux");
        let initrd = img.join("initrd.img");
        let n = Needs {
            qemu: Path::new("/bin/sh"),
            firmware: "no-such-firmware.rom",
            kernel: &kernel,
            initrd: &initrd,
            disk: Path::new("disk.qcow2"),
            files: vec![sb.join("memory.ram")],
            kvm: false,
            dir: &sb,
            image_dir: &img,
        };
        let s = plan(0x7b00_0010, &n).unwrap();
        let paths: Vec<&Path> = s.binds.iter().map(|b| b.path.as_path()).collect();
        for want in [kernel.as_path(), &initrd, &img.join("rootfs.qcow2"), &sb] {
            assert!(paths.contains(&want), "{want:?} not in {paths:?}");
        }
        // Nothing else of the image directory, nothing under the sandbox
        // dir twice, no /etc, no whole directory but the sandbox's.
        assert!(!paths.contains(&img.as_path()));
        assert!(!paths.iter().any(|p| p.starts_with("/etc")));
        assert!(s.binds.iter().filter(|b| b.dir).all(|b| b.path == sb));
        assert!(s
            .binds
            .iter()
            .filter(|b| b.writable)
            .all(|b| b.path == sb || b.device));
        assert!(paths.iter().filter(|p| p.starts_with(&sb)).count() == 1);
        assert!(s.new_net);
        assert_ne!(s.uid, 0);
        assert!(s.reads.contains(&sb.join("memory.ram")), "{:?}", s.reads);
    }

    /// A header a compromised QEMU wrote names a host file (standing for
    /// /etc/shadow, mode 0600), directly, relatively, or through a symlink
    /// planted in the sandbox directory: the plan is refused, nothing is
    /// bound, the host file keeps its mode.
    #[test]
    fn a_backing_chain_leaving_the_image_and_sandbox_dirs_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let (sb, img, host) = (
            d.path().join("sb"),
            d.path().join("img"),
            d.path().join("etc"),
        );
        for p in [&sb, &img, &host] {
            std::fs::create_dir_all(p).unwrap();
        }
        for f in ["vmlinux", "initrd.img"] {
            std::fs::write(img.join(f), f).unwrap();
        }
        qcow2(&img.join("rootfs.qcow2"), "", None, None);
        let shadow = host.join("shadow");
        std::fs::write(&shadow, "root:$6$secret").unwrap();
        std::fs::set_permissions(&shadow, std::fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&shadow, sb.join("planted")).unwrap();
        qcow2(&sb.join("base.qcow2"), shadow.to_str().unwrap(), None, None);
        let (kernel, initrd) = (img.join("vmlinux"), img.join("initrd.img"));
        for backing in [
            shadow.to_str().unwrap().to_string(),
            "../etc/shadow".into(),
            "planted".into(),
            // One level down: the sandbox's base names the host file.
            "base.qcow2".into(),
        ] {
            qcow2(&sb.join("disk.qcow2"), &backing, None, None);
            let n = Needs {
                qemu: Path::new("/bin/sh"),
                firmware: "no-such-firmware.rom",
                kernel: &kernel,
                initrd: &initrd,
                disk: Path::new("disk.qcow2"),
                files: vec![],
                kvm: false,
                dir: &sb,
                image_dir: &img,
            };
            let e = plan(0x7b00_0030, &n).unwrap_err();
            assert_eq!(
                e.code,
                stasis_core::ErrorCode::IntegrityError,
                "{backing}: {e}"
            );
            assert!(e.message.contains("leaves"), "{e}");
            let md = std::fs::metadata(&shadow).unwrap();
            assert_eq!(md.mode() & 0o777, 0o600, "{backing}");
        }
    }
}
