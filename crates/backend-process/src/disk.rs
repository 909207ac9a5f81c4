//! Disk quota of the writable layer (`resources.disk_mb`).
//!
//! The overlay's upper and work dirs live on a per-sandbox ext4 filesystem:
//! a sparse image file `spec.dir/layer.img` of `disk_mb` MiB, loop-mounted
//! (nosuid, nodev) on `spec.dir/layer` in the host's mount namespace. A
//! sandbox that fills its disk gets ENOSPC; the host filesystem only ever
//! holds the blocks actually written. This works on any host with loop
//! devices and e2fsprogs (no project quotas needed). The mount lives in the
//! daemon's data dir, which sandboxes never see; it is removed by `destroy`,
//! by orphan cleanup (mounts under the state dir of sandboxes the server does
//! not know) and by whoever removes the sandbox dir after `destroy`.
//!
//! `disk_mb = 0` keeps the old layout: upper/work directly in `spec.dir`.

use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Smallest quota accepted (ext4 metadata needs a few MiB).
pub const MIN_DISK_MB: u64 = 8;

pub fn image(dir: &Path) -> PathBuf {
    dir.join("layer.img")
}

pub fn mount_point(dir: &Path) -> PathBuf {
    dir.join("layer")
}

/// Decode the octal escapes (`\040`) of a /proc/self/mountinfo path.
fn unescape(s: &str) -> PathBuf {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = b[i + 1..i + 4]
                .iter()
                .fold(0u32, |acc, c| acc * 8 + (c - b'0') as u32);
            out.push(v as u8);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    PathBuf::from(std::ffi::OsString::from(
        <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(&out),
    ))
}

/// Mount points of the daemon's mount namespace.
pub fn mount_points() -> Vec<PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split(' ').nth(4).map(unescape))
        .collect()
}

pub fn is_mounted(p: &Path) -> bool {
    mount_points().iter().any(|m| m == p)
}

fn run(cmd: &mut Command) -> io::Result<()> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("run {:?}: {e}", cmd.get_program().to_string_lossy()),
        )
    })?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{} failed: {}",
            cmd.get_program().to_string_lossy(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Make sure the sandbox's quota filesystem exists and is mounted.
pub fn ensure(dir: &Path, disk_mb: u64) -> io::Result<()> {
    let mp = mount_point(dir);
    if is_mounted(&mp) {
        return Ok(());
    }
    std::fs::create_dir_all(&mp)?;
    let img = image(dir);
    if !img.exists() {
        let tmp = dir.join("layer.img.new");
        let f = std::fs::File::create(&tmp)?;
        f.set_len(disk_mb << 20)?; // sparse
        drop(f);
        // No journal (a crash loses at most the sandbox's own unsynced
        // writes, as with the plain host dir before), lazy init: ~40 ms.
        run(Command::new("mkfs.ext4")
            .args([
                "-q",
                "-F",
                "-m",
                "0",
                "-O",
                "^has_journal",
                "-E",
                "lazy_itable_init=1,nodiscard",
            ])
            .arg(&tmp))?;
        std::fs::rename(&tmp, &img)?;
    }
    run(Command::new("mount")
        .args(["-t", "ext4", "-o", "loop,nosuid,nodev,noatime"])
        .arg(&img)
        .arg(&mp))
}

/// Unmount the quota filesystem (its loop device goes with it). Waits a
/// little for the sandbox's mount namespace to let go, then detaches lazily.
pub fn unmount(dir: &Path) -> io::Result<()> {
    unmount_point(&mount_point(dir))
}

fn unmount_point(mp: &Path) -> io::Result<()> {
    for _ in 0..40 {
        if !is_mounted(mp) {
            return Ok(());
        }
        match nix::mount::umount2(mp, nix::mount::MntFlags::empty()) {
            Ok(()) => continue,
            Err(nix::errno::Errno::EBUSY) => std::thread::sleep(Duration::from_millis(25)),
            Err(nix::errno::Errno::EINVAL) | Err(nix::errno::Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(io::Error::other(format!("umount {}: {e}", mp.display()))),
        }
    }
    nix::mount::umount2(mp, nix::mount::MntFlags::MNT_DETACH)
        .map_err(|e| io::Error::other(format!("umount -l {}: {e}", mp.display())))
}

/// Unmount every quota filesystem `<base>/<name>/layer` whose `<name>` is
/// not in `keep` (crash leftovers), and all of them with an empty `keep`.
pub fn unmount_stale(base: &Path, keep: &[&str]) -> io::Result<()> {
    for mp in mount_points() {
        let Ok(rel) = mp.strip_prefix(base) else {
            continue;
        };
        let comps: Vec<_> = rel.components().collect();
        if comps.len() != 2 || comps[1].as_os_str() != "layer" {
            continue;
        }
        let name = comps[0].as_os_str().to_string_lossy();
        if !keep.contains(&name.as_ref()) {
            unmount_point(&mp)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn mountinfo_escapes() {
        assert_eq!(
            super::unescape("/a\\040b/c"),
            std::path::PathBuf::from("/a b/c")
        );
        assert_eq!(
            super::unescape("/plain"),
            std::path::PathBuf::from("/plain")
        );
    }
}
