//! A disk the jailed QEMU wrote is refused at export (pause, snapshot) and
//! import (resume, restore) unless its header names exactly the expected
//! backing file and no external data file; the host files it names are
//! neither read into an artifact nor changed, and the sandbox's disk is not
//! lost. Real `qemu-img` images.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use stasis_core::ErrorCode;

use crate::disk::Export;
use crate::{qemu, AccelChoice, MicrovmBackend, MicrovmConfig, DISK_ARTIFACT};

struct Fixture {
    _d: tempfile::TempDir,
    rootfs: PathBuf,
    shadow: PathBuf,
    data: PathBuf,
    sb: PathBuf,
    out: PathBuf,
    b: MicrovmBackend,
}

fn img(cwd: &Path, args: &[&str]) {
    let o = std::process::Command::new("qemu-img")
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap();
    assert!(o.status.success(), "qemu-img {args:?}: {o:?}");
}

fn fixture() -> Fixture {
    let d = tempfile::tempdir().unwrap();
    let (image, sb, out) = (
        d.path().join("img"),
        d.path().join("sb"),
        d.path().join("out"),
    );
    for p in [&image, &sb, &out] {
        std::fs::create_dir_all(p).unwrap();
    }
    let rootfs = image.join("rootfs.qcow2");
    img(
        &image,
        &["create", "-q", "-f", "qcow2", "rootfs.qcow2", "1M"],
    );
    // Stands for /etc/shadow: root's, 0600, raw bytes.
    let shadow = d.path().join("shadow");
    std::fs::write(&shadow, vec![0x5a; 65536]).unwrap();
    std::fs::set_permissions(&shadow, std::fs::Permissions::from_mode(0o600)).unwrap();
    let data = d.path().join("data.raw");
    let mut c = MicrovmConfig::new(d.path());
    c.accel = AccelChoice::Tcg;
    Fixture {
        rootfs,
        shadow,
        data,
        sb,
        out,
        b: MicrovmBackend::new(c),
        _d: d,
    }
}

impl Fixture {
    /// Every way a compromised QEMU may rewrite the header of `name` in the
    /// sandbox dir, each applied to a fresh file by `f`.
    fn hostile(&self, name: &str) -> Vec<(String, Box<dyn Fn()>)> {
        let (sb, shadow, data, rootfs) = (
            self.sb.clone(),
            self.shadow.display().to_string(),
            self.data.display().to_string(),
            self.rootfs.display().to_string(),
        );
        let name = name.to_string();
        let mk = move |args: Vec<String>| -> Box<dyn Fn()> {
            let (sb, name) = (sb.clone(), name.clone());
            Box::new(move || {
                let _ = std::fs::remove_file(sb.join(&name));
                let mut a: Vec<&str> = vec!["create", "-q", "-f", "qcow2", "-u"];
                a.extend(args.iter().map(String::as_str));
                a.push(&name);
                a.push("1M");
                img(&sb, &a);
            })
        };
        vec![
            (
                "backing = host file (raw)".into(),
                mk(vec!["-b".into(), shadow.clone(), "-F".into(), "raw".into()]),
            ),
            (
                "backing = host file (qcow2 claimed)".into(),
                mk(vec![
                    "-b".into(),
                    shadow.clone(),
                    "-F".into(),
                    "qcow2".into(),
                ]),
            ),
            (
                "backing = relative path out".into(),
                mk(vec![
                    "-b".into(),
                    "../shadow".into(),
                    "-F".into(),
                    "raw".into(),
                ]),
            ),
            (
                "expected backing + external data file".into(),
                mk(vec![
                    "-b".into(),
                    rootfs.clone(),
                    "-F".into(),
                    "qcow2".into(),
                    "-o".into(),
                    format!("data_file={data}"),
                ]),
            ),
            (
                "expected backing as raw".into(),
                mk(vec!["-b".into(), rootfs.clone(), "-F".into(), "raw".into()]),
            ),
            ("no backing".into(), mk(vec![])),
        ]
    }

    fn assert_host_untouched(&self, case: &str) {
        let md = std::fs::metadata(&self.shadow).unwrap();
        assert_eq!((md.uid(), md.mode() & 0o777), (0, 0o600), "{case}");
        assert!(
            !self.out.join(DISK_ARTIFACT).exists(),
            "{case}: an artifact was kept"
        );
    }
}

#[tokio::test]
async fn export_refuses_a_disk_whose_header_qemu_rewrote() {
    let f = fixture();
    for how in [Export::Link, Export::Copy] {
        for (case, plant) in f.hostile(qemu::DISK) {
            plant();
            let before = std::fs::read(f.sb.join(qemu::DISK)).unwrap();
            let e = crate::disk::export_disk(&f.b.config().qemu_img, &f.sb, &f.out, how, &f.rootfs)
                .await
                .unwrap_err();
            assert_eq!(e.code, ErrorCode::IntegrityError, "{case}: {e}");
            f.assert_host_untouched(&case);
            // The sandbox keeps its disk (nothing lost, nothing half-kept).
            assert_eq!(
                std::fs::read(f.sb.join(qemu::DISK)).unwrap(),
                before,
                "{case}"
            );
        }
    }
    // With a base (a resumed sandbox): the top is checked against the base,
    // a base QEMU planted (not root's, or a symlink) is refused.
    let rootfs = f.rootfs.display().to_string();
    img(
        &f.sb,
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-b",
            &rootfs,
            "-F",
            "qcow2",
            qemu::BASE_DISK,
        ],
    );
    for (case, plant) in f.hostile(qemu::DISK) {
        plant();
        let e = crate::disk::export_disk(
            &f.b.config().qemu_img,
            &f.sb,
            &f.out,
            Export::Link,
            &f.rootfs,
        )
        .await
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::IntegrityError, "base, {case}: {e}");
        f.assert_host_untouched(&case);
        assert!(f.sb.join(qemu::DISK).is_file(), "base, {case}: disk lost");
    }
    // A flatten interrupted after its rebase is redone: the top then names
    // `.base.qcow2`, which the daemon wrote; it exports.
    img(
        &f.sb,
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-u",
            "-b",
            ".base.qcow2",
            "-F",
            "qcow2",
            qemu::DISK,
            "1M",
        ],
    );
    crate::disk::export_disk(
        &f.b.config().qemu_img,
        &f.sb,
        &f.out,
        Export::Link,
        &f.rootfs,
    )
    .await
    .unwrap();
    crate::trust::check_disk(&f.out.join(DISK_ARTIFACT), &f.rootfs).unwrap();
    std::fs::remove_file(f.out.join(DISK_ARTIFACT)).unwrap();
    std::fs::remove_file(f.sb.join(qemu::BASE_DISK)).unwrap();
    std::os::unix::fs::symlink(&f.shadow, f.sb.join(qemu::BASE_DISK)).unwrap();
    let e = crate::disk::export_disk(
        &f.b.config().qemu_img,
        &f.sb,
        &f.out,
        Export::Link,
        &f.rootfs,
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, ErrorCode::IntegrityError, "{e}");
    f.assert_host_untouched("symlinked base");
    std::fs::remove_file(f.sb.join(qemu::BASE_DISK)).unwrap();
    // The honest disk still exports, and imports back.
    img(
        &f.sb,
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-b",
            &rootfs,
            "-F",
            "qcow2",
            qemu::DISK,
        ],
    );
    crate::disk::export_disk(
        &f.b.config().qemu_img,
        &f.sb,
        &f.out,
        Export::Link,
        &f.rootfs,
    )
    .await
    .unwrap();
    let sb2 = f.sb.with_file_name("sb2");
    std::fs::create_dir_all(&sb2).unwrap();
    crate::disk::import_disk(&f.b.config().qemu_img, &f.out, &sb2, &f.rootfs)
        .await
        .unwrap();
    assert!(sb2.join(qemu::BASE_DISK).is_file());
    crate::trust::check_disk(&sb2.join(qemu::DISK), Path::new(qemu::BASE_DISK)).unwrap();
}

#[tokio::test]
async fn import_refuses_an_artifact_naming_anything_but_the_image() {
    let f = fixture();
    for (case, plant) in f.hostile(DISK_ARTIFACT) {
        plant();
        // The planted file plays the artifact of a pause that kept it.
        std::fs::rename(f.sb.join(DISK_ARTIFACT), f.out.join(DISK_ARTIFACT)).unwrap();
        let sb2 = f.sb.with_file_name("sb2");
        std::fs::create_dir_all(&sb2).unwrap();
        let e = crate::disk::import_disk(&f.b.config().qemu_img, &f.out, &sb2, &f.rootfs)
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::IntegrityError, "{case}: {e}");
        assert!(!sb2.join(qemu::BASE_DISK).exists(), "{case}");
        assert!(!sb2.join(qemu::DISK).exists(), "{case}");
        std::fs::remove_file(f.out.join(DISK_ARTIFACT)).unwrap();
        f.assert_host_untouched(&case);
    }
}
