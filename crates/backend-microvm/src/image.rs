//! Guest images: resolving `<images_dir>/<name>/{vmlinux,initrd.img,rootfs.qcow2,image.json}`,
//! the image digest a saved guest depends on, and the kernel command line
//! (with the TCG clock parameters).

use std::path::{Path, PathBuf};

use stasis_core::{Error, ErrorCode, Result};

use crate::qemu::{self, Accel};

/// A resolved guest image.
#[derive(Debug, Clone)]
pub struct Image {
    pub name: String,
    pub dir: PathBuf,
    /// Identifies the image build: a saved memory state only makes sense on
    /// the same kernel/initrd/rootfs.
    pub digest: String,
    /// image.json's `kernel_cmdline` (the image builder's recommendation).
    pub cmdline: Option<String>,
    /// image.json's `kernel_cmdline_tcg`, with `{host_tsc_khz}` to fill in.
    pub cmdline_tcg: Option<String>,
}

impl Image {
    pub fn resolve(images_dir: &Path, name: Option<&str>) -> Result<Image> {
        Image::resolve_with(images_dir, None, name)
    }

    /// [`Image::resolve`], where `sha256:<id>` (an image of the daemon's image
    /// store, pinned at create) is that image's guest directory
    /// `<store>/images/<hex>/guest/`, which the daemon builds before create.
    pub fn resolve_with(
        images_dir: &Path,
        store: Option<&Path>,
        name: Option<&str>,
    ) -> Result<Image> {
        let name = name.unwrap_or("default");
        let dir = if let Some(hex) = name.strip_prefix("sha256:") {
            let ok = hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
            match store {
                Some(s) if ok => s.join("images").join(hex).join("guest"),
                _ => {
                    return Err(Error::new(
                        ErrorCode::InvalidManifest,
                        format!("image: {name:?} cannot be used: this daemon has no image store"),
                    )
                    .with_field("image"))
                }
            }
        } else if name.starts_with('/') {
            PathBuf::from(name)
        } else {
            if name.is_empty()
                || name.len() > 128
                || !name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
                || name.starts_with('.')
            {
                return Err(Error::new(
                    ErrorCode::InvalidManifest,
                    format!("image: {name:?} is not an image name ([A-Za-z0-9._-])"),
                )
                .with_field("image"));
            }
            images_dir.join(name)
        };
        for f in ["vmlinux", "initrd.img", "rootfs.qcow2"] {
            if !dir.join(f).is_file() {
                return Err(Error::new(
                    ErrorCode::InvalidManifest,
                    format!(
                        "image: {name:?} has no {f} in {} (build it with scripts/build-guest-image.sh)",
                        dir.display()
                    ),
                )
                .with_field("image"));
            }
        }
        let digest = match std::fs::read(dir.join("image.json")) {
            Ok(b) => image_json_digest(&b).unwrap_or_else(|| blake3::hash(&b).to_hex().to_string()),
            Err(_) => {
                // No manifest: sizes of the three files.
                let mut h = blake3::Hasher::new();
                for f in ["vmlinux", "initrd.img", "rootfs.qcow2"] {
                    let len = std::fs::metadata(dir.join(f)).map(|m| m.len()).unwrap_or(0);
                    h.update(f.as_bytes());
                    h.update(&len.to_le_bytes());
                }
                h.finalize().to_hex().to_string()
            }
        };
        let json: Option<serde_json::Value> = std::fs::read(dir.join("image.json"))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok());
        let field = |k: &str| {
            json.as_ref()
                .and_then(|j| j.get(k))
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        Ok(Image {
            name: name.to_string(),
            dir,
            digest,
            cmdline: field("kernel_cmdline"),
            cmdline_tcg: field("kernel_cmdline_tcg"),
        })
    }
    pub fn vmlinux(&self) -> PathBuf {
        self.dir.join("vmlinux")
    }
    pub fn initrd(&self) -> PathBuf {
        self.dir.join("initrd.img")
    }
    pub fn rootfs(&self) -> PathBuf {
        self.dir.join("rootfs.qcow2")
    }
}

/// The digest of what a saved guest depends on: the kernel and the root
/// filesystem (from image.json's `files.<name>.blake3`, so a rebuild that
/// changes nothing else, e.g. its timestamp, keeps snapshots loadable).
fn image_json_digest(json: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(json).ok()?;
    let mut h = blake3::Hasher::new();
    for f in ["vmlinux", "rootfs.qcow2"] {
        let b = v.get("files")?.get(f)?.get("blake3")?.as_str()?;
        h.update(f.as_bytes());
        h.update(b":");
        h.update(b.as_bytes());
        h.update(b"\n");
    }
    Some(h.finalize().to_hex().to_string())
}

/// The kernel command line. Under TCG the guest's TSC runs at the host's
/// rate, but on a loaded host the kernel's PIT calibration fails ("Unable to
/// calibrate against PIT", "Marking TSC unstable") and boot then stalls for
/// minutes in timer setup; telling it the frequency (`tsc_early_khz`) makes
/// boot independent of host load. Later the clocksource watchdog (checking
/// the TSC against jiffies, whose ticks lag when the vCPU thread is starved)
/// marks the TSC unstable and falls back to `refined-jiffies`, and the guest
/// clock then runs ~10% slow; `tsc=reliable` keeps the TSC.
pub fn kernel_append(accel: Accel, image: &Image) -> String {
    let mut a = image
        .cmdline
        .clone()
        .unwrap_or_else(|| qemu::DEFAULT_APPEND.to_string());
    if accel == Accel::Tcg {
        if let Some(khz) = host_tsc_khz() {
            let extra = image
                .cmdline_tcg
                .clone()
                .unwrap_or_else(|| "tsc_early_khz={host_tsc_khz}".into())
                .replace("{host_tsc_khz}", &khz.to_string());
            a.push(' ');
            a.push_str(&extra);
        }
        if !a.split_whitespace().any(|w| w == "tsc=reliable") {
            a.push_str(" tsc=reliable");
        }
    }
    a
}

/// The host's TSC frequency in kHz, from /proc/cpuinfo (when the TSC is
/// constant; otherwise `None`).
pub fn host_tsc_khz() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let flags = info.lines().find(|l| l.starts_with("flags"))?;
    if !flags.split_whitespace().any(|f| f == "constant_tsc") {
        return None;
    }
    let mhz: f64 = info
        .lines()
        .find(|l| l.starts_with("cpu MHz"))?
        .split(':')
        .nth(1)?
        .trim()
        .parse()
        .ok()?;
    Some((mhz * 1000.0).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_names_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        for bad in ["../x", "a/b", "", ".hidden"] {
            let e = Image::resolve(dir.path(), Some(bad)).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidManifest, "{bad}");
        }
        let e = Image::resolve(dir.path(), None).unwrap_err();
        assert!(e.message.contains("vmlinux"), "{e}");
        let img = dir.path().join("default");
        std::fs::create_dir(&img).unwrap();
        for f in ["vmlinux", "initrd.img", "rootfs.qcow2"] {
            std::fs::write(img.join(f), f).unwrap();
        }
        let a = Image::resolve(dir.path(), None).unwrap();
        std::fs::write(img.join("image.json"), "{}").unwrap();
        let b = Image::resolve(dir.path(), Some("default")).unwrap();
        assert_ne!(a.digest, b.digest);
        assert_eq!(b.dir, img);
        let j = |built: &str, root: &str| {
            format!(
                r#"{{"built_at":"{built}","files":{{"vmlinux":{{"blake3":"k"}},"rootfs.qcow2":{{"blake3":"{root}"}},"initrd.img":{{"blake3":"i"}}}}}}"#
            )
        };
        let d1 = image_json_digest(j("t1", "r1").as_bytes()).unwrap();
        assert_eq!(d1, image_json_digest(j("t2", "r1").as_bytes()).unwrap());
        assert_ne!(d1, image_json_digest(j("t1", "r2").as_bytes()).unwrap());
    }

    #[test]
    fn kernel_command_line_follows_image_json() {
        let mut img = Image {
            name: "x".into(),
            dir: "/x".into(),
            digest: "d".into(),
            cmdline: None,
            cmdline_tcg: None,
        };
        assert_eq!(kernel_append(Accel::Kvm, &img), qemu::DEFAULT_APPEND);
        let tcg = kernel_append(Accel::Tcg, &img);
        assert!(
            tcg.starts_with(qemu::DEFAULT_APPEND) && tcg.contains("tsc=reliable"),
            "{tcg}"
        );
        img.cmdline = Some("console=ttyS0 quiet tsc=reliable cryptomgr.notests".into());
        img.cmdline_tcg = Some("tsc_early_khz={host_tsc_khz}".into());
        let tcg = kernel_append(Accel::Tcg, &img);
        assert_eq!(tcg.matches("tsc=reliable").count(), 1, "{tcg}");
        assert!(tcg.contains("cryptomgr.notests"), "{tcg}");
        if let Some(khz) = host_tsc_khz() {
            assert!(tcg.ends_with(&format!("tsc_early_khz={khz}")), "{tcg}");
        }
    }
}
