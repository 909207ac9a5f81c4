//! The daemon's own paths: the image store's layout (`layers/`, `images/`,
//! `refs/`, `cache/`, `tmp/`), files it names itself (digests, validated
//! names, unique temp names) and the roots of trees it creates. Nothing a
//! tenant shapes is reached through here: a tree whose shape a tenant
//! controls (a build context, a layer being assembled, an image root, an
//! archive being unpacked) is touched only through [`stasis_fsroot::Dir`].
//!
//! Path-based `std::fs` calls are refused in this crate by clippy
//! (`disallowed-methods` in `crates/image/clippy.toml`); this module is
//! the one place allowed to make them, so each use elsewhere names it.
#![allow(clippy::disallowed_methods)]

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

pub use fs::{File, Metadata, ReadDir};

// Every call below is on a path of the daemon's store or temp space (see the
// module doc), never one a tenant's tree resolves.

pub fn open(p: impl AsRef<Path>) -> io::Result<File> {
    File::open(p) // daemon's own path (module doc)
}

pub fn open_with(opts: &fs::OpenOptions, p: impl AsRef<Path>) -> io::Result<File> {
    opts.open(p) // daemon's own path (module doc)
}

pub fn create(p: impl AsRef<Path>) -> io::Result<File> {
    File::create(p) // daemon's own path (module doc)
}

pub fn create_dir(p: impl AsRef<Path>) -> io::Result<()> {
    fs::create_dir(p) // daemon's own path (module doc)
}

pub fn create_dir_all(p: impl AsRef<Path>) -> io::Result<()> {
    fs::create_dir_all(p) // daemon's own path (module doc)
}

/// std's `remove_dir_all` removes through descriptors and never follows a
/// symlink below `p` (the CVE-2022-21658 fix), so a tenant-shaped tree under
/// a store path (an image root) is removed without leaving it.
pub fn remove_dir_all(p: impl AsRef<Path>) -> io::Result<()> {
    fs::remove_dir_all(p) // daemon's own path; never follows links below
}

pub fn remove_dir(p: impl AsRef<Path>) -> io::Result<()> {
    fs::remove_dir(p)
}

pub fn remove_file(p: impl AsRef<Path>) -> io::Result<()> {
    fs::remove_file(p) // daemon's own path (module doc)
}

pub fn rename(from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
    fs::rename(from, to) // daemon's own paths (module doc)
}

pub fn hard_link(from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<()> {
    fs::hard_link(from, to)
}

pub fn copy(from: impl AsRef<Path>, to: impl AsRef<Path>) -> io::Result<u64> {
    fs::copy(from, to) // daemon's own paths (module doc)
}

pub fn write(p: impl AsRef<Path>, data: impl AsRef<[u8]>) -> io::Result<()> {
    fs::write(p, data) // daemon's own path (module doc)
}

pub fn read(p: impl AsRef<Path>) -> io::Result<Vec<u8>> {
    fs::read(p)
}

pub fn read_to_string(p: impl AsRef<Path>) -> io::Result<String> {
    fs::read_to_string(p)
}

pub fn read_dir(p: impl AsRef<Path>) -> io::Result<ReadDir> {
    fs::read_dir(p)
}

pub fn metadata(p: impl AsRef<Path>) -> io::Result<Metadata> {
    fs::metadata(p)
}

pub fn canonicalize(p: impl AsRef<Path>) -> io::Result<PathBuf> {
    fs::canonicalize(p)
}

pub fn is_dir(p: impl AsRef<Path>) -> bool {
    p.as_ref().is_dir()
}

pub fn is_file(p: impl AsRef<Path>) -> bool {
    p.as_ref().is_file()
}

pub fn exists(p: impl AsRef<Path>) -> bool {
    p.as_ref().exists()
}
