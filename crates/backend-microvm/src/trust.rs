//! Nothing a jailed QEMU wrote steers the daemon. A guest may own its QEMU;
//! that QEMU writes `disk.qcow2` (header included) and may create names in
//! the sandbox directory. So the daemon (root):
//!
//! * reads qcow2 headers only through `O_NOFOLLOW` descriptors of regular
//!   files, and accepts a disk only when it has **no external data file**
//!   and its backing file is **exactly** the one the daemon gave it
//!   ([`check_disk`]);
//! * follows a backing chain only while each file's real path lies under
//!   the image's directory or the sandbox directory ([`backing_chain`]), so
//!   a jail sees (binds) and reads (chmods) nothing else;
//! * changes modes and owners through descriptors opened `O_NOFOLLOW`.
//!
//! The file-safety helpers themselves (`within`, `fix_mode`,
//! `open_regular`) are the jail's (`stasis_jail`), re-exported here.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use stasis_core::{Error, Result};
use stasis_jail::absolute;
pub use stasis_jail::{fix_mode, open_regular, within};

/// qcow2 header extension: the name of an external data file.
const EXT_DATA_FILE: u32 = 0x4441_5441;
/// qcow2 header extension: the format of the backing file.
const EXT_BACKING_FORMAT: u32 = 0xe279_2aca;
/// qcow2 incompatible feature bit: the data lives in an external file.
const INCOMPAT_DATA_FILE: u64 = 1 << 2;

/// What a qcow2 header names outside itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Qcow2Refs {
    pub backing: Option<PathBuf>,
    pub backing_format: Option<String>,
    /// An external data file (the incompatible bit or the extension).
    pub data_file: bool,
}

/// The references of a qcow2 header (`None`: not qcow2, e.g. raw).
pub fn qcow2_refs(path: &Path) -> Result<Option<Qcow2Refs>> {
    let mut f = open_regular(path)?;
    // Header and extensions lie in the first cluster; the backing name may
    // follow them. 64 KiB holds both for every image qemu-img writes (it
    // refuses names over 1023 bytes); anything beyond is refused below.
    let mut h = Vec::with_capacity(65536);
    (&mut f).take(65536).read_to_end(&mut h)?;
    if h.len() < 72 || h[..4] != *b"QFI\xfb" {
        return Ok(None);
    }
    let bad = |why: &str| Error::integrity(format!("{}: qcow2 header {why}", path.display()));
    let be32 = |o: usize| u32::from_be_bytes(h[o..o + 4].try_into().unwrap());
    let be64 = |o: usize| u64::from_be_bytes(h[o..o + 8].try_into().unwrap());
    let version = be32(4);
    let (b_off, b_len) = (be64(8), be32(16) as u64);
    let backing = if b_off == 0 || b_len == 0 {
        None
    } else {
        let end = b_off.checked_add(b_len).filter(|e| *e <= h.len() as u64);
        let end = end.ok_or_else(|| bad("has a backing file name out of bounds"))?;
        let name = &h[b_off as usize..end as usize];
        Some(PathBuf::from(std::ffi::OsStr::from_bytes(name)))
    };
    let mut refs = Qcow2Refs {
        backing,
        backing_format: None,
        data_file: false,
    };
    let ext_start = match version {
        2 => 72,
        3 => {
            if h.len() < 104 {
                return Err(bad("is truncated"));
            }
            refs.data_file = be64(72) & INCOMPAT_DATA_FILE != 0;
            be32(100) as usize
        }
        v => return Err(bad(&format!("has version {v}"))),
    };
    let mut at = ext_start;
    loop {
        if at + 8 > h.len() {
            return Err(bad("has extensions past its first 64 KiB"));
        }
        let (ty, len) = (be32(at), be32(at + 4) as usize);
        if ty == 0 {
            break;
        }
        let data = at + 8;
        if data + len > h.len() {
            return Err(bad("has an extension out of bounds"));
        }
        match ty {
            EXT_DATA_FILE => refs.data_file = true,
            EXT_BACKING_FORMAT => {
                refs.backing_format =
                    Some(String::from_utf8_lossy(&h[data..data + len]).into_owned());
            }
            _ => {}
        }
        at = data + len.div_ceil(8) * 8;
    }
    Ok(Some(refs))
}

/// The files of a qcow2 chain below `disk` (its backing files, in order,
/// as QEMU names them). The headers may have been written by a QEMU the
/// guest owns: each backing file is refused before it is even opened
/// unless its real path lies under one of `roots`, and a layer with an
/// external data file is refused.
pub fn backing_chain(disk: &Path, roots: &[&Path]) -> Result<Vec<PathBuf>> {
    let mut chain = Vec::new();
    let (mut cur, mut real) = (disk.to_path_buf(), disk.to_path_buf());
    while let Some(refs) = qcow2_refs(&real)? {
        if refs.data_file {
            return Err(Error::integrity(format!(
                "{}: names an external data file: refused",
                cur.display()
            )));
        }
        let Some(b) = refs.backing else { break };
        let next = absolute(cur.parent().unwrap_or(Path::new("/")), &b);
        if chain.contains(&next) || chain.len() > 64 {
            return Err(Error::backend(format!(
                "{}: backing chain loops or is too deep",
                disk.display()
            )));
        }
        real = within(&next, roots).map_err(|e| {
            Error::integrity(format!(
                "the backing chain of {} leaves the image and sandbox directories: {}",
                disk.display(),
                e.message
            ))
        })?;
        chain.push(next.clone());
        cur = next;
    }
    Ok(chain)
}

/// Accept `disk` only as a qcow2 without an external data file whose
/// backing file is exactly `backing` (as the daemon wrote it, relative or
/// absolute) in qcow2 format. Anything else is an `integrity_error`.
pub fn check_disk(disk: &Path, backing: &Path) -> Result<()> {
    let refuse = |why: String| {
        Error::integrity(format!(
            "disk {} {why}: the disk was altered outside the daemon, refusing to use it",
            disk.display()
        ))
    };
    let refs = qcow2_refs(disk)?.ok_or_else(|| refuse("is not a qcow2 image".into()))?;
    if refs.data_file {
        return Err(refuse("names an external data file".into()));
    }
    match &refs.backing {
        Some(b) if b == backing => {}
        Some(b) => {
            return Err(refuse(format!(
                "has backing file {:?}, expected {:?}",
                b.display(),
                backing.display()
            )))
        }
        None => return Err(refuse("has no backing file".into())),
    }
    if let Some(f) = refs.backing_format.as_deref().filter(|f| *f != "qcow2") {
        return Err(refuse(format!("has backing format {f:?}, expected qcow2")));
    }
    Ok(())
}

/// The same check, as `qemu-img info` reads the header (a second reader:
/// what QEMU itself would follow). `-U` and no `--backing-chain`: nothing
/// but the file itself is opened.
pub async fn check_disk_qemu_img(qemu_img: &Path, disk: &Path, backing: &Path) -> Result<()> {
    // Bounded: reading one header takes milliseconds; a stuck run is killed.
    let mut cmd = tokio::process::Command::new(qemu_img);
    cmd.args(["info", "-U", "--output=json", "-f", "qcow2"])
        .arg(disk);
    let what = format!("qemu-img info {}", disk.display());
    let out = crate::util::output_bounded(cmd, std::time::Duration::from_secs(120), &what).await?;
    if !out.status.success() {
        return Err(Error::integrity(format!(
            "disk {}: qemu-img info: {}",
            disk.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let info: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| Error::backend(format!("qemu-img info output: {e}")))?;
    let refuse = |why: String| {
        Error::integrity(format!(
            "disk {} {why}: the disk was altered outside the daemon, refusing to use it",
            disk.display()
        ))
    };
    if info
        .pointer("/format-specific/data/data-file")
        .is_some_and(|v| !v.is_null())
    {
        return Err(refuse("names an external data file".into()));
    }
    let want = backing.to_string_lossy();
    match info.get("backing-filename").and_then(|v| v.as_str()) {
        Some(b) if b == want => {}
        b => return Err(refuse(format!("has backing file {b:?}, expected {want:?}"))),
    }
    match info.get("backing-filename-format").and_then(|v| v.as_str()) {
        None | Some("qcow2") => Ok(()),
        Some(f) => Err(refuse(format!("has backing format {f:?}, expected qcow2"))),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A qcow2 v3 header naming `backing` (if not empty), with a backing
    /// format extension `fmt` and/or a data-file extension.
    pub fn qcow2(path: &Path, backing: &str, fmt: Option<&str>, data_file: Option<&str>) {
        let mut h = vec![0u8; 1024];
        h[..4].copy_from_slice(b"QFI\xfb");
        h[4..8].copy_from_slice(&3u32.to_be_bytes());
        h[20..24].copy_from_slice(&16u32.to_be_bytes());
        h[96..100].copy_from_slice(&4u32.to_be_bytes());
        h[100..104].copy_from_slice(&104u32.to_be_bytes());
        let mut at = 104;
        let mut ext = |ty: u32, data: &[u8], h: &mut Vec<u8>| {
            h[at..at + 4].copy_from_slice(&ty.to_be_bytes());
            h[at + 4..at + 8].copy_from_slice(&(data.len() as u32).to_be_bytes());
            h[at + 8..at + 8 + data.len()].copy_from_slice(data);
            at += 8 + data.len().div_ceil(8) * 8;
        };
        if let Some(f) = fmt {
            ext(EXT_BACKING_FORMAT, f.as_bytes(), &mut h);
        }
        if let Some(d) = data_file {
            ext(EXT_DATA_FILE, d.as_bytes(), &mut h);
            h[72..80].copy_from_slice(&INCOMPAT_DATA_FILE.to_be_bytes());
        }
        if !backing.is_empty() {
            h[8..16].copy_from_slice(&512u64.to_be_bytes());
            h[16..20].copy_from_slice(&(backing.len() as u32).to_be_bytes());
            h[512..512 + backing.len()].copy_from_slice(backing.as_bytes());
        }
        std::fs::write(path, h).unwrap();
    }

    #[test]
    fn only_the_expected_backing_and_no_data_file_pass() {
        let d = tempfile::tempdir().unwrap();
        let disk = d.path().join("disk.qcow2");
        let want = Path::new("/images/default/rootfs.qcow2");
        qcow2(&disk, want.to_str().unwrap(), Some("qcow2"), None);
        check_disk(&disk, want).unwrap();
        // Every other backing file, a foreign backing format, an external
        // data file (extension or bit), no backing, not qcow2, a symlink.
        let bad: Vec<(&str, Option<&str>, Option<&str>)> = vec![
            ("/etc/shadow", Some("raw"), None),
            ("/etc/shadow", None, None),
            (
                "/images/default/rootfs.qcow2/../../../etc/shadow",
                None,
                None,
            ),
            ("rootfs.qcow2", Some("qcow2"), None),
            (want.to_str().unwrap(), Some("raw"), None),
            (want.to_str().unwrap(), Some("qcow2"), Some("/etc/shadow")),
            ("", None, None),
        ];
        for (b, f, df) in bad {
            qcow2(&disk, b, f, df);
            let e = check_disk(&disk, want).unwrap_err();
            assert_eq!(
                e.code,
                stasis_core::ErrorCode::IntegrityError,
                "{b} {f:?} {df:?}: {e}"
            );
        }
        // The data-file bit alone is enough.
        qcow2(&disk, want.to_str().unwrap(), None, None);
        let mut h = std::fs::read(&disk).unwrap();
        h[79] |= 4;
        std::fs::write(&disk, h).unwrap();
        assert!(check_disk(&disk, want).is_err());
        std::fs::write(
            &disk,
            b"raw bytes, not a qcow2 image at all........................................",
        )
        .unwrap();
        assert!(check_disk(&disk, want).is_err());
        let real = d.path().join("real.qcow2");
        qcow2(&real, want.to_str().unwrap(), None, None);
        std::fs::remove_file(&disk).unwrap();
        std::os::unix::fs::symlink(&real, &disk).unwrap();
        let e = check_disk(&disk, want).unwrap_err();
        assert!(e.message.contains("symlink"), "{e}");
    }

    #[test]
    fn backing_chains_resolve_relative_and_absolute_names() {
        let d = tempfile::tempdir().unwrap();
        let img = d.path().join("img");
        std::fs::create_dir(&img).unwrap();
        let root = img.join("rootfs.qcow2");
        qcow2(&root, "", None, None);
        qcow2(
            &d.path().join("base.qcow2"),
            root.to_str().unwrap(),
            None,
            None,
        );
        qcow2(&d.path().join("disk.qcow2"), "base.qcow2", None, None);
        let roots = [d.path()];
        assert_eq!(
            backing_chain(&d.path().join("disk.qcow2"), &roots).unwrap(),
            vec![d.path().join("base.qcow2"), root.clone()]
        );
        assert!(backing_chain(&root, &roots).unwrap().is_empty());
        // A chain that loops is refused, not followed forever.
        qcow2(&d.path().join("a.qcow2"), "b.qcow2", None, None);
        qcow2(&d.path().join("b.qcow2"), "a.qcow2", None, None);
        assert!(backing_chain(&d.path().join("a.qcow2"), &roots).is_err());
        // A layer with an external data file is refused.
        qcow2(&d.path().join("df.qcow2"), "", None, Some("/etc/shadow"));
        qcow2(&d.path().join("disk.qcow2"), "df.qcow2", None, None);
        let e = backing_chain(&d.path().join("disk.qcow2"), &roots).unwrap_err();
        assert!(e.message.contains("data file"), "{e}");
    }
}
