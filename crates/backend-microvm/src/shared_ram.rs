//! One file per snapshot RAM image on this node, for every restore of it.
//!
//! A restore maps its snapshot's RAM file copy-on-write (`base.ram`), so
//! forks of one snapshot could share the unchanged guest pages in the page
//! cache, but only if they map the *same file*: the server stages every
//! restore's artifacts from the store afresh, so sixteen forks mapped
//! sixteen copies and shared nothing (a fork's PSS held its whole
//! touched RAM).
//!
//! So a verified RAM file is kept by its BLAKE3 (the hash its `meta.json`
//! names, which the store verified) in `.ram-by-hash/` beside the sandbox
//! directories, and every restore of that content links the kept file as
//! its `base.ram` (a hard link: same inode, same page cache). A restore
//! that finds its content kept neither hashes nor reads its staged copy.
//!
//! The kept files are the daemon's (root, read-only to everyone else):
//! QEMU opens `base.ram` read-only and maps it private (`share=off,
//! readonly=on`), nothing writes it. Content is shared only where it is
//! identical to the byte (a 256 MiB image), i.e. between restores of one
//! snapshot: what a tenant could learn from a hit is that a RAM image it
//! holds itself is held here too. A kept file no sandbox links any more
//! (link count 1) is removed by the next sweep (each restore, and the
//! backend's housekeeping).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use stasis_core::Result;

/// Beside the sandbox directories.
pub(crate) const DIR: &str = ".ram-by-hash";

fn cache_dir(sandbox_dir: &Path) -> Option<PathBuf> {
    sandbox_dir.parent().map(|p| p.join(DIR))
}

fn valid_hash(h: &str) -> bool {
    h.len() == 64 && h.bytes().all(|c| c.is_ascii_hexdigit())
}

/// The kept file for `hash`, when there is one the daemon owns.
fn kept(dir: &Path, hash: &str) -> Option<PathBuf> {
    let p = dir.join(format!("{hash}.ram"));
    let md = std::fs::symlink_metadata(&p).ok()?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    (md.file_type().is_file() && md.uid() == me && md.mode() & 0o022 == 0).then_some(p)
}

/// The kept RAM file of the snapshot whose `meta.json` is in `partial`
/// (its other artifacts not yet restored), as the store's reuse answer:
/// the store then links it into the stage instead of fetching the image,
/// and the restore maps it (`link_kept`) without reading the staged name.
pub(crate) fn kept_for(sandbox_dir: &Path, partial: &Path) -> Vec<(String, PathBuf)> {
    let Ok(Some(m)) = crate::snapshot::read_meta(partial) else {
        return Vec::new();
    };
    let (true, Some(hash)) = (m.ram_file, m.memory_ram_blake3.as_deref()) else {
        return Vec::new();
    };
    match cache_dir(sandbox_dir).filter(|_| valid_hash(hash)) {
        Some(dir) => kept(&dir, hash)
            .map(|p| vec![(crate::snapshot::MEMORY_RAM.to_string(), p)])
            .unwrap_or_default(),
        None => Vec::new(),
    }
}

/// Link the kept RAM file of `hash` as `base` (a restore's `base.ram`).
/// False when none is kept (or linking fails): the caller verifies its
/// staged copy and offers it with `keep`.
pub(crate) fn link_kept(sandbox_dir: &Path, hash: &str, base: &Path) -> bool {
    if !valid_hash(hash) {
        return false;
    }
    let Some(dir) = cache_dir(sandbox_dir) else {
        return false;
    };
    let Some(src) = kept(&dir, hash) else {
        return false;
    };
    let _ = std::fs::remove_file(base);
    std::fs::hard_link(&src, base).is_ok()
}

/// Keep a staged RAM file, verified to hash to `hash`, for later restores
/// and link it as `base`. Falls back to linking (or copying) the staged
/// file as before when it cannot be kept (another filesystem).
pub(crate) fn keep(sandbox_dir: &Path, hash: &str, staged: &Path, base: &Path) -> Result<()> {
    let kept_it = valid_hash(hash)
        && cache_dir(sandbox_dir).is_some_and(|dir| {
            use std::os::unix::fs::DirBuilderExt;
            let _ = std::fs::DirBuilder::new().mode(0o755).create(&dir);
            let dst = dir.join(format!("{hash}.ram"));
            // Another restore may have kept it meanwhile: either is fine.
            let linked = std::fs::hard_link(staged, &dst).is_ok() || kept(&dir, hash).is_some();
            linked && link_kept(sandbox_dir, hash, base)
        });
    if !kept_it {
        crate::util::link_or_copy(staged, base)?;
    }
    sweep(sandbox_dir);
    Ok(())
}

/// Remove kept files no restore links any more.
pub(crate) fn sweep(sandbox_dir: &Path) {
    let Some(dir) = cache_dir(sandbox_dir) else {
        return;
    };
    sweep_dir(&dir);
}

pub(crate) fn sweep_dir(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if let Ok(md) = std::fs::symlink_metadata(&p) {
            if md.file_type().is_file() && md.nlink() == 1 {
                let _ = std::fs::remove_file(&p);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restores_of_one_image_share_one_file_until_none_links_it() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (root.path().join("sb-a"), root.path().join("sb-b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let h = "ab".repeat(32);
        let stage_a = root.path().join("stage-a.ram");
        std::fs::write(&stage_a, b"ram").unwrap();
        assert!(!link_kept(&a, &h, &a.join("base.ram")), "nothing kept yet");
        keep(&a, &h, &stage_a, &a.join("base.ram")).unwrap();
        std::fs::remove_file(&stage_a).unwrap();
        assert!(link_kept(&b, &h, &b.join("base.ram")));
        let ino = |p: &Path| std::fs::metadata(p).unwrap().ino();
        assert_eq!(ino(&a.join("base.ram")), ino(&b.join("base.ram")));
        // Still linked by a sandbox: kept.
        std::fs::remove_file(a.join("base.ram")).unwrap();
        sweep(&a);
        assert!(link_kept(&a, &h, &a.join("base.ram")));
        std::fs::remove_file(a.join("base.ram")).unwrap();
        std::fs::remove_file(b.join("base.ram")).unwrap();
        sweep(&a);
        assert!(!link_kept(&a, &h, &a.join("base.ram")), "swept");
        // Not a hash: never looked up.
        assert!(!link_kept(&a, "../x", &a.join("base.ram")));
    }

    #[test]
    fn a_restore_is_told_the_kept_image_its_metadata_names() {
        let root = tempfile::tempdir().unwrap();
        let (a, b) = (root.path().join("sb-a"), root.path().join("sb-b"));
        std::fs::create_dir_all(&a).unwrap();
        let h = "cd".repeat(32);
        let staged = root.path().join("staged.ram");
        std::fs::write(&staged, b"ram").unwrap();
        keep(&a, &h, &staged, &a.join("base.ram")).unwrap();
        let partial = root.path().join("partial");
        std::fs::create_dir_all(&partial).unwrap();
        assert!(kept_for(&b, &partial).is_empty(), "no metadata yet");
        let mut m = crate::snapshot::tests::meta();
        m.memory_ram_blake3 = Some(h.clone());
        crate::snapshot::write(&partial, &m).unwrap();
        let got = kept_for(&b, &partial);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, crate::snapshot::MEMORY_RAM);
        assert_eq!(
            std::fs::read(&got[0].1).unwrap(),
            b"ram",
            "the kept file itself"
        );
        // Another image, or no RAM file in the snapshot: nothing.
        m.memory_ram_blake3 = Some("ef".repeat(32));
        crate::snapshot::write(&partial, &m).unwrap();
        assert!(kept_for(&b, &partial).is_empty());
        m.memory_ram_blake3 = Some(h.clone());
        m.ram_file = false;
        crate::snapshot::write(&partial, &m).unwrap();
        assert!(kept_for(&b, &partial).is_empty());
    }
}
