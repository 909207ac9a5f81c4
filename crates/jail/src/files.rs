//! Touching files a jailed program may have written or named, without
//! letting it steer root: regular files only, opened `O_NOFOLLOW`, modes
//! and owners changed through the descriptor, and only under the roots the
//! caller names.

use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use stasis_core::{Error, Result};

/// Open a file for reading without following a symlink at its last
/// component (nor blocking on a FIFO); it must be a regular file.
pub fn open_regular(path: &Path) -> Result<std::fs::File> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| {
            if e.raw_os_error() == Some(libc::ELOOP) {
                Error::integrity(format!("{} is a symlink: refused", path.display()))
            } else {
                Error::backend(format!("{}: {e}", path.display()))
            }
        })?;
    if !f.metadata()?.file_type().is_file() {
        return Err(Error::integrity(format!(
            "{} is not a regular file: refused",
            path.display()
        )));
    }
    Ok(f)
}

/// `path`'s real location, refused unless it lies under one of `roots`
/// (each taken by its real location too): a name the jailed program wrote cannot make
/// the daemon open, bind or chmod anything elsewhere.
pub fn within(path: &Path, roots: &[&Path]) -> Result<PathBuf> {
    let real = std::fs::canonicalize(path)
        .map_err(|e| Error::integrity(format!("{}: {e}", path.display())))?;
    for r in roots {
        if let Ok(r) = std::fs::canonicalize(r) {
            if real.starts_with(&r) {
                return Ok(real);
            }
        }
    }
    Err(Error::integrity(format!(
        "{} ({}) lies outside {}: refused",
        path.display(),
        real.display(),
        roots
            .iter()
            .map(|r| r.display().to_string())
            .collect::<Vec<_>>()
            .join(" and ")
    )))
}

/// Set owner (if given) and mode of a regular file through an `O_NOFOLLOW`
/// descriptor: a symlink planted under the name is refused, not followed.
pub fn fix_mode(path: &Path, owner: Option<(u32, u32)>, mode: impl Fn(u32) -> u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let f = open_regular(path)?;
    if let Some((u, g)) = owner {
        std::os::unix::fs::fchown(&f, Some(u), Some(g))
            .map_err(|e| Error::backend(format!("chown {}: {e}", path.display())))?;
    }
    let old = f.metadata()?.mode() & 0o7777;
    let new = mode(old);
    if new != old {
        f.set_permissions(std::fs::Permissions::from_mode(new))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn paths_outside_the_roots_are_refused_even_through_symlinks() {
        let d = tempfile::tempdir().unwrap();
        let (img, sb, host) = (
            d.path().join("img"),
            d.path().join("sb"),
            d.path().join("etc"),
        );
        for p in [&img, &sb, &host] {
            std::fs::create_dir(p).unwrap();
        }
        std::fs::write(img.join("rootfs.qcow2"), "r").unwrap();
        std::fs::write(host.join("shadow"), "s").unwrap();
        std::os::unix::fs::symlink(host.join("shadow"), sb.join("base.qcow2")).unwrap();
        let roots = [img.as_path(), sb.as_path()];
        within(&img.join("rootfs.qcow2"), &roots).unwrap();
        assert!(within(&host.join("shadow"), &roots).is_err());
        assert!(within(&sb.join("base.qcow2"), &roots).is_err());
        assert!(within(&sb.join("../etc/shadow"), &roots).is_err());
    }

    #[test]
    fn modes_change_through_the_file_never_a_symlink() {
        let d = tempfile::tempdir().unwrap();
        let secret = d.path().join("shadow");
        std::fs::write(&secret, "s").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let link = d.path().join("memory.ram");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        assert!(fix_mode(&link, None, |m| m | 0o044).is_err());
        assert_eq!(std::fs::metadata(&secret).unwrap().mode() & 0o777, 0o600);
        fix_mode(&secret, None, |m| m | 0o044).unwrap();
        assert_eq!(std::fs::metadata(&secret).unwrap().mode() & 0o777, 0o644);
    }
}
