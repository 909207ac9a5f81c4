//! Writing fixed names in a directory someone else may write too. A
//! sandbox directory is shared with the jailed QEMU (root:<qemu gid>, mode
//! 01770): a QEMU the guest owns can create any name there before the
//! daemon does, e.g. `vm.json` as a symlink to `/etc/passwd`, or a stage
//! directory as a symlink to a place it chose. The sticky bit only keeps it
//! from replacing what the daemon already made. So the daemon:
//!
//! * writes a file through a fresh temporary name created
//!   `O_CREAT|O_EXCL` (which never follows a symlink) and renames it over
//!   the name (a rename replaces a symlink, never follows it):
//!   [`write_replace`];
//! * makes a directory it will fill only with `mkdir` of a name it has just
//!   cleared (without following a symlink), and checks that what it got is a
//!   real directory of its own: [`fresh_dir`].

use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use stasis_core::{Error, Result};

/// Attempts before giving up on a name someone keeps re-creating.
const TRIES: usize = 16;

/// Write `data` to `path` (mode `mode`) without following anything planted
/// at `path` or at the temporary name next to it.
pub fn write_replace(path: &Path, data: &[u8], mode: u32) -> Result<()> {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| Error::internal(format!("{}: no file name", path.display())))?
        .to_string_lossy();
    for _ in 0..TRIES {
        let tmp = dir.join(format!(
            ".{name}.{}.{}.tmp",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let mut f = match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(&tmp)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::internal(format!("create {}: {e}", tmp.display()))),
        };
        let r = f
            .write_all(data)
            .and_then(|_| f.sync_data())
            .and_then(|_| std::fs::rename(&tmp, path));
        if let Err(e) = r {
            let _ = std::fs::remove_file(&tmp);
            return Err(Error::internal(format!("write {}: {e}", path.display())));
        }
        return Ok(());
    }
    Err(Error::internal(format!(
        "write {}: every temporary name is taken",
        dir.display()
    )))
}

/// Remove whatever `path` names without following a symlink: a directory
/// with its contents (std's `remove_dir_all` does not follow symlinks),
/// anything else as a name.
pub fn remove_nofollow(path: &Path) -> Result<()> {
    let r = match std::fs::symlink_metadata(path) {
        Ok(md) if md.file_type().is_dir() => std::fs::remove_dir_all(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    };
    match r {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::internal(format!("remove {}: {e}", path.display())))
        }
        _ => Ok(()),
    }
}

/// Disk space (allocated blocks, `st_blocks * 512`) held by what `paths`
/// name, never following a symlink: a regular file counts its blocks, a real
/// directory its entries (depth-first, not followed), anything else
/// nothing; a file reached twice (hard links) counts once. Missing: 0.
pub fn allocated_nofollow(paths: &[std::path::PathBuf]) -> u64 {
    fn walk(p: &Path, seen: &mut std::collections::HashSet<(u64, u64)>, depth: u32) -> u64 {
        let Ok(md) = std::fs::symlink_metadata(p) else {
            return 0;
        };
        let ft = md.file_type();
        if ft.is_file() {
            if seen.insert((md.dev(), md.ino())) {
                return md.blocks() * 512;
            }
            return 0;
        }
        if !ft.is_dir() || depth > 8 {
            return 0;
        }
        let Ok(rd) = std::fs::read_dir(p) else {
            return 0;
        };
        rd.flatten().map(|e| walk(&e.path(), seen, depth + 1)).sum()
    }
    let mut seen = std::collections::HashSet::new();
    paths.iter().map(|p| walk(p, &mut seen, 0)).sum()
}

/// The share of a regular file `path` (not followed) linked from several
/// places (a RAM image several sandboxes map): its allocated bytes over its
/// link count. Anything else, or missing: 0.
pub fn allocated_share_nofollow(path: &Path) -> u64 {
    match std::fs::symlink_metadata(path) {
        Ok(md) if md.file_type().is_file() => md.blocks() * 512 / md.nlink().max(1),
        _ => 0,
    }
}

/// An empty directory at `path` that this process made and owns: whatever
/// was there is removed (not followed), the directory is made with `mkdir`
/// (which fails rather than follow a name re-created in between), and
/// checked with `lstat` to be a real directory owned by our uid.
pub fn fresh_dir(path: &Path) -> Result<()> {
    let euid = unsafe { libc::geteuid() };
    for _ in 0..TRIES {
        remove_nofollow(path)?;
        match std::fs::create_dir(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(Error::internal(format!("mkdir {}: {e}", path.display()))),
        }
        let md = std::fs::symlink_metadata(path)?;
        if md.file_type().is_dir() && md.uid() == euid {
            return Ok(());
        }
        return Err(Error::internal(format!(
            "{} was replaced while it was made: refusing to use it",
            path.display()
        )));
    }
    Err(Error::internal(format!(
        "{}: something keeps re-creating it",
        path.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn victim(d: &Path) -> std::path::PathBuf {
        let v = d.join("passwd");
        std::fs::write(&v, "root:x:0:0").unwrap();
        std::fs::set_permissions(&v, std::fs::Permissions::from_mode(0o600)).unwrap();
        v
    }

    #[test]
    fn a_planted_symlink_is_replaced_not_written_through() {
        let d = tempfile::tempdir().unwrap();
        let v = victim(d.path());
        let sb = d.path().join("sb");
        std::fs::create_dir(&sb).unwrap();
        // The name itself, and a dangling one, planted as symlinks.
        std::os::unix::fs::symlink(&v, sb.join("vm.json")).unwrap();
        std::os::unix::fs::symlink(d.path().join("new"), sb.join("qemu.pid")).unwrap();
        write_replace(&sb.join("vm.json"), b"{}", 0o644).unwrap();
        write_replace(&sb.join("qemu.pid"), b"42\n", 0o644).unwrap();
        assert_eq!(std::fs::read_to_string(&v).unwrap(), "root:x:0:0");
        assert_eq!(std::fs::metadata(&v).unwrap().mode() & 0o777, 0o600);
        assert!(!d.path().join("new").exists());
        for (n, want) in [("vm.json", "{}"), ("qemu.pid", "42\n")] {
            let md = std::fs::symlink_metadata(sb.join(n)).unwrap();
            assert!(md.file_type().is_file(), "{n}");
            assert_eq!(std::fs::read_to_string(sb.join(n)).unwrap(), want);
        }
        // No temporary is left behind.
        let names: Vec<_> = std::fs::read_dir(&sb).unwrap().collect();
        assert_eq!(names.len(), 2);
    }

    #[test]
    fn allocated_counts_blocks_once_and_never_follows() {
        let d = tempfile::tempdir().unwrap();
        let outside = d.path().join("outside");
        std::fs::write(&outside, vec![1u8; 64 * 1024]).unwrap();
        let sb = d.path().join("sb");
        std::fs::create_dir_all(sb.join("local")).unwrap();
        std::fs::write(sb.join("ram"), vec![1u8; 128 * 1024]).unwrap();
        std::fs::hard_link(sb.join("ram"), sb.join("local/ram-link")).unwrap();
        std::fs::write(sb.join("local/state"), vec![1u8; 32 * 1024]).unwrap();
        std::os::unix::fs::symlink(&outside, sb.join("local/planted")).unwrap();
        std::os::unix::fs::symlink(&outside, sb.join("disk")).unwrap();
        let blocks = |p: &Path| std::fs::metadata(p).unwrap().blocks() * 512;
        let want = blocks(&sb.join("ram")) + blocks(&sb.join("local/state"));
        let names = ["ram", "local", "disk", "missing"].map(|n| sb.join(n));
        assert_eq!(allocated_nofollow(&names), want);
        assert!(want >= 160 * 1024);
        assert_eq!(allocated_nofollow(&[sb.join("missing")]), 0);
        // Linked from elsewhere too (a shared RAM image): half of it is ours.
        std::fs::write(sb.join("base"), vec![1u8; 256 * 1024]).unwrap();
        std::fs::hard_link(sb.join("base"), d.path().join("kept")).unwrap();
        let base = blocks(&sb.join("base"));
        assert_eq!(allocated_share_nofollow(&sb.join("base")), base / 2);
        assert_eq!(allocated_share_nofollow(&sb.join("disk")), 0, "a symlink");
        assert_eq!(allocated_share_nofollow(&sb.join("missing")), 0);
    }

    #[test]
    fn a_planted_stage_is_cleared_without_following_it() {
        let d = tempfile::tempdir().unwrap();
        let v = victim(d.path());
        let elsewhere = d.path().join("elsewhere");
        std::fs::create_dir(&elsewhere).unwrap();
        std::fs::write(elsewhere.join("keep"), "k").unwrap();
        let stage = d.path().join("pause-stage");
        // A symlink to a directory, to a file, a file, a directory with
        // contents (and a symlink inside): each becomes an empty real
        // directory of ours, and nothing it pointed at is touched.
        std::os::unix::fs::symlink(&elsewhere, &stage).unwrap();
        fresh_dir(&stage).unwrap();
        std::fs::remove_dir(&stage).unwrap();
        std::os::unix::fs::symlink(&v, &stage).unwrap();
        fresh_dir(&stage).unwrap();
        std::fs::remove_dir(&stage).unwrap();
        std::fs::write(&stage, "x").unwrap();
        fresh_dir(&stage).unwrap();
        std::fs::write(stage.join("old"), "o").unwrap();
        std::os::unix::fs::symlink(&elsewhere, stage.join("link")).unwrap();
        fresh_dir(&stage).unwrap();
        let md = std::fs::symlink_metadata(&stage).unwrap();
        assert!(md.file_type().is_dir());
        assert_eq!(md.uid(), unsafe { libc::geteuid() });
        assert_eq!(std::fs::read_dir(&stage).unwrap().count(), 0);
        assert_eq!(
            std::fs::read_to_string(elsewhere.join("keep")).unwrap(),
            "k"
        );
        assert_eq!(std::fs::read_to_string(&v).unwrap(), "root:x:0:0");
    }
}
