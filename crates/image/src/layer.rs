//! Layers: applying a layer tar (plain, gzip, bzip2, xz or zstd, sniffed by
//! magic bytes) onto a root directory without ever writing outside it, and
//! writing a directory of changes (an overlayfs upper dir) back out as a
//! layer. The same rules unpack a build context and a Dockerfile's `ADD` of
//! a local archive.
//!
//! Refused, with the entry named: `..` components, absolute entry names,
//! relative symlinks that climb out of the root, hardlinks to anything but a
//! regular file inside the root, writing through a symlink, device nodes,
//! setuid/setgid bits unless the source is trusted (the operator), and a
//! layer that decompresses past [`ApplyOptions::max_bytes`]. Absolute
//! symlink targets are kept: they resolve inside the root once it is a
//! sandbox's `/`, and nothing here follows a symlink on the host.
//!
//! OCI whiteouts: `.wh.NAME` deletes NAME from lower layers, `.wh..wh..opq`
//! empties its directory of everything lower layers put there. In a plain
//! archive (a build context, an `ADD`), where a `.wh.` name could only mean
//! a file the next layer would turn into a deletion, such names are refused.
//!
//! Application is not atomic by itself: [`apply_all_atomic`] builds into a
//! staging directory beside the destination and renames it into place, so a
//! refusal leaves nothing behind.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use stasis_core::{Error, ErrorCode, Result};
use stasis_fsroot::{self as fsroot, fchmod, fchown, is_root, Dir, Resolve};
use tar::EntryType;

use crate::digest::{Digest, HashingReader};
use crate::owned;

/// Limits and trust of one application.
#[derive(Debug, Clone, Copy)]
pub struct ApplyOptions {
    /// Refuse a layer whose decompressed tar stream exceeds this many bytes.
    pub max_bytes: u64,
    /// Keep setuid/setgid bits (operator sources only); else refuse them.
    pub allow_setid: bool,
    /// An image layer (`.wh.` entries are OCI whiteouts); false for a plain
    /// archive, where they are refused.
    pub whiteouts: bool,
}

/// The default of [`ApplyOptions::max_bytes`] (the daemon's
/// `--max-layer-mb`): 8 GiB.
pub const DEFAULT_MAX_LAYER_BYTES: u64 = 8 << 30;

impl Default for ApplyOptions {
    fn default() -> Self {
        ApplyOptions {
            max_bytes: DEFAULT_MAX_LAYER_BYTES,
            allow_setid: false,
            whiteouts: true,
        }
    }
}

impl ApplyOptions {
    /// The same limits and trust for a plain archive (no whiteouts).
    pub fn plain(self) -> ApplyOptions {
        ApplyOptions {
            whiteouts: false,
            ..self
        }
    }
}

/// What one application saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LayerStats {
    pub entries: u64,
    /// Decompressed bytes of the tar stream.
    pub bytes: u64,
}

const WH_PREFIX: &str = ".wh.";
const WH_OPAQUE: &str = ".wh..wh..opq";

fn refuse(entry: &str, why: impl std::fmt::Display) -> Error {
    Error::invalid(format!("layer entry {entry:?} refused: {why}"))
}

/// Wrap a possibly compressed stream: gzip (`1f 8b`), bzip2 (`BZh`), xz
/// (`fd 37 7a 58 5a 00`), zstd (`28 b5 2f fd`) or a plain tar. Multi-member
/// gzip and multi-stream bzip2/xz files are read whole, as `tar` does.
pub fn decompress<'a>(r: impl Read + 'a) -> Result<Box<dyn Read + 'a>> {
    let mut r = BufReader::new(r);
    let head = r.fill_buf()?;
    if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Box::new(flate2::read::MultiGzDecoder::new(r)))
    } else if head.starts_with(b"BZh") {
        Ok(Box::new(bzip2::read::MultiBzDecoder::new(r)))
    } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
        Ok(Box::new(liblzma::read::XzDecoder::new_multi_decoder(r)))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Ok(Box::new(zstd::Decoder::with_buffer(r)?))
    } else {
        Ok(Box::new(r))
    }
}

/// Whether `path` is a tar archive, plain or compressed in a format
/// [`decompress`] reads: its first 512-byte block (decompressed) is a tar
/// header with a valid checksum. Anything else (a plain `.gz` of a text
/// file, a truncated archive) is not, and Docker's `ADD` copies it as is.
pub fn is_tar(path: &Path) -> Result<bool> {
    // The operator's or the daemon's own file (an upload it stored).
    is_tar_reader(&owned::open(path)?)
}

/// [`is_tar`] of an open file (read from its current offset).
pub fn is_tar_reader(f: &fs::File) -> Result<bool> {
    let mut block = [0u8; 512];
    let mut r = decompress(f)?;
    let mut got = 0;
    while got < block.len() {
        match r.read(&mut block[got..]) {
            Ok(0) => return Ok(false),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // Not a stream of its sniffed kind after all.
            Err(_) => return Ok(false),
        }
    }
    if block.iter().all(|&b| b == 0) {
        return Ok(false);
    }
    let header = tar::Header::from_byte_slice(&block);
    let Ok(stored) = header.cksum() else {
        return Ok(false);
    };
    let mut computed = header.clone();
    computed.set_cksum();
    Ok(computed.cksum().ok() == Some(stored))
}

/// Counts bytes and fails once more than `limit` pass.
pub(crate) struct Limited<R> {
    pub(crate) inner: R,
    pub(crate) read: u64,
    pub(crate) limit: u64,
}

impl<R> Limited<R> {
    pub(crate) fn new(inner: R, limit: u64) -> Limited<R> {
        Limited {
            inner,
            read: 0,
            limit,
        }
    }
}

impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read += n as u64;
        if self.read > self.limit {
            return Err(io::Error::other(LimitExceeded));
        }
        Ok(n)
    }
}

#[derive(Debug)]
struct LimitExceeded;
impl std::fmt::Display for LimitExceeded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("decompression limit exceeded")
    }
}
impl std::error::Error for LimitExceeded {}

pub(crate) fn is_limit(e: &io::Error) -> bool {
    e.get_ref().is_some_and(|i| i.is::<LimitExceeded>())
}

/// Normalise an entry name to its relative components: `./` and empty
/// components dropped; absolute names and `..` refused.
pub fn normalize(name: &str) -> Result<PathBuf> {
    if name.starts_with('/') {
        return Err(refuse(name, "absolute path"));
    }
    let mut out = PathBuf::new();
    for c in Path::new(name).components() {
        match c {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            Component::ParentDir => return Err(refuse(name, "'..' escapes the root")),
            Component::RootDir | Component::Prefix(_) => return Err(refuse(name, "absolute path")),
        }
    }
    Ok(out)
}

/// Apply a layer file (any supported compression) onto `root`, a
/// directory of the daemon's (a staging root, a step's layer).
pub fn apply_file(layer: &Path, root: &Path, opts: &ApplyOptions) -> Result<LayerStats> {
    let f = owned::open(layer)
        .map_err(|e| Error::from(e).context(format!("open layer {}", layer.display())))?;
    apply(f, root, opts)
}

/// Apply one layer stream onto `root` (which must exist).
pub fn apply(r: impl Read, root: &Path, opts: &ApplyOptions) -> Result<LayerStats> {
    let root = Dir::open(root, Resolve::NoSymlinks)?;
    apply_at(r, &root, opts)
}

/// Apply one layer stream onto the open directory `root`. Every entry is
/// made by name in a directory opened without following any link, so an
/// entry never lands outside `root`, whatever earlier entries planted.
pub fn apply_at(r: impl Read, root: &Dir, opts: &ApplyOptions) -> Result<LayerStats> {
    let limited = Limited {
        inner: decompress(r)?,
        read: 0,
        limit: opts.max_bytes,
    };
    let mut ar = tar::Archive::new(limited);
    let mut created: HashSet<PathBuf> = HashSet::new();
    let mut stats = LayerStats::default();
    let over = |opts: &ApplyOptions| {
        Error::new(
            ErrorCode::PayloadTooLarge,
            format!(
                "layer refused: it decompresses to more than the limit of {} bytes",
                opts.max_bytes
            ),
        )
    };
    let entries = ar
        .entries()
        .map_err(|e| Error::invalid(format!("layer: {e}")))?;
    for entry in entries {
        let mut entry = match entry {
            Ok(e) => e,
            Err(e) if is_limit(&e) => return Err(over(opts)),
            Err(e) => return Err(Error::invalid(format!("layer is not a valid tar: {e}"))),
        };
        stats.entries += 1;
        let name = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        match apply_entry(&mut entry, &name, root, opts, &mut created) {
            Ok(()) => {}
            Err(e) if e.message.contains("decompression limit exceeded") => return Err(over(opts)),
            Err(e) => return Err(e),
        }
    }
    let mut inner = ar.into_inner();
    // Trailing padding counts too, and must not hide a bomb.
    match io::copy(&mut inner, &mut io::sink()) {
        Ok(_) => {}
        Err(e) if is_limit(&e) => return Err(over(opts)),
        Err(_) => {}
    }
    stats.bytes = inner.read;
    Ok(stats)
}

fn apply_entry<R: Read>(
    entry: &mut tar::Entry<'_, R>,
    name: &str,
    root: &Dir,
    opts: &ApplyOptions,
    created: &mut HashSet<PathBuf>,
) -> Result<()> {
    let rel = normalize(name)?;
    let Some(file_name) = rel.file_name().map(|f| f.to_os_string()) else {
        return Ok(()); // the root itself ("./")
    };
    let fname = file_name.to_string_lossy().into_owned();
    let parent_rel = rel.parent().unwrap_or(Path::new("")).to_path_buf();
    let parent = ensure_dirs(root, &parent_rel, name, created)?;
    let header = entry.header();
    let kind = header.entry_type();
    let mode = header.mode().map_err(|e| refuse(name, e))?;
    if mode & 0o6000 != 0 && !opts.allow_setid && (kind.is_file() || kind.is_dir()) {
        return Err(refuse(name, "setuid/setgid bit from an untrusted source"));
    }
    if !opts.whiteouts && fname.starts_with(WH_PREFIX) {
        return Err(refuse(
            name,
            "a name starting with .wh. marks a deletion in an image layer; a plain archive cannot carry it",
        ));
    }
    if fname == WH_OPAQUE {
        return opaque(&parent, &parent_rel, created);
    }
    if let Some(hidden) = fname.strip_prefix(WH_PREFIX) {
        if hidden.is_empty() || hidden == "." || hidden == ".." {
            return Err(refuse(name, "malformed whiteout"));
        }
        return Ok(parent.remove_all_at(OsStr::new(hidden))?);
    }
    let target = file_name.as_os_str();
    let uid = header.uid().unwrap_or(0) as u32;
    let gid = header.gid().unwrap_or(0) as u32;
    let mtime = header.mtime().unwrap_or(0) as i64;
    let root_user = is_root();
    match kind {
        EntryType::Directory => {
            match parent.lstat_at(target) {
                Ok(st) if fsroot::kind(&st) == libc::S_IFDIR => {}
                Ok(_) => {
                    parent.remove_all_at(target)?;
                    parent.mkdir_at(target, 0o700)?;
                }
                Err(_) => parent.mkdir_at(target, 0o700)?,
            }
            let d = parent.sub(target)?;
            fchmod(d.as_fd(), mode)?;
            if root_user {
                fchown(d.as_fd(), uid, gid)?;
            }
        }
        EntryType::Regular | EntryType::Continuous => {
            parent.remove_all_at(target)?;
            let f = parent.open_at(target, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o600)?;
            let mut f = fs::File::from(f);
            io::copy(entry, &mut f).map_err(|e| {
                if is_limit(&e) {
                    Error::invalid("decompression limit exceeded")
                } else {
                    refuse(name, e)
                }
            })?;
            if root_user {
                fchown(f.as_fd(), uid, gid)?;
            }
            fchmod(f.as_fd(), mode)?;
            drop(f);
            let _ = parent.set_mtime_at(target, mtime);
        }
        EntryType::Symlink => {
            let link = entry
                .link_name_bytes()
                .ok_or_else(|| refuse(name, "symlink without a target"))?;
            let link = String::from_utf8_lossy(&link).into_owned();
            check_symlink_target(name, &parent_rel, &link)?;
            parent.remove_all_at(target)?;
            parent.symlink_at(OsStr::new(&link), target)?;
            if root_user {
                parent.chown_at(target, uid, gid)?;
            }
            let _ = parent.set_mtime_at(target, mtime);
        }
        EntryType::Link => {
            let link = entry
                .link_name_bytes()
                .ok_or_else(|| refuse(name, "hardlink without a target"))?;
            let link = String::from_utf8_lossy(&link).into_owned();
            let link_rel = normalize(&link)
                .map_err(|_| refuse(name, format!("hardlink target {link:?} leaves the root")))?;
            let not_file = || {
                refuse(
                    name,
                    format!("hardlink target {link:?} is not a regular file inside the root"),
                )
            };
            // No symlink on the way to it, and it is a regular file.
            let (src_dir, src_name) = root.split(&link_rel).map_err(|_| not_file())?;
            match src_dir.lstat_at(&src_name) {
                Ok(st) if fsroot::kind(&st) == libc::S_IFREG => {}
                _ => return Err(not_file()),
            }
            parent.remove_all_at(target)?;
            src_dir.link_at(&src_name, &parent, target)?;
        }
        EntryType::Fifo => {
            parent.remove_all_at(target)?;
            parent.mkfifo_at(target, mode)?;
            if root_user {
                parent.chown_at(target, uid, gid)?;
            }
        }
        EntryType::Char | EntryType::Block => {
            return Err(refuse(name, "device node"));
        }
        other => {
            return Err(refuse(name, format!("unsupported entry type {other:?}")));
        }
    }
    created.insert(rel);
    Ok(())
}

/// Walk (creating as needed) the directories of `rel` under `root`,
/// refusing any component that exists as a symlink or non-directory.
fn ensure_dirs(root: &Dir, rel: &Path, name: &str, created: &mut HashSet<PathBuf>) -> Result<Dir> {
    let mut cur = root.with_resolve(Resolve::NoSymlinks)?;
    let mut cur_rel = PathBuf::new();
    for c in rel.components() {
        let Component::Normal(c) = c else { continue };
        cur_rel.push(c);
        match cur.lstat_at(c) {
            Ok(m) if fsroot::kind(&m) == libc::S_IFDIR => {}
            Ok(m) if fsroot::kind(&m) == libc::S_IFLNK => {
                return Err(refuse(
                    name,
                    format!("would write through the symlink {}", cur_rel.display()),
                ))
            }
            Ok(_) => {
                return Err(refuse(
                    name,
                    format!("{} is not a directory", cur_rel.display()),
                ))
            }
            Err(_) => {
                cur.mkdir_at(c, 0o755)?;
                fchmod(cur.sub(c)?.as_fd(), 0o755)?;
                created.insert(cur_rel.clone());
            }
        }
        cur = cur.sub(c)?;
    }
    Ok(cur)
}

/// A relative symlink target must not climb above the root from the
/// link's directory.
fn check_symlink_target(name: &str, parent_rel: &Path, link: &str) -> Result<()> {
    if link.is_empty() {
        return Err(refuse(name, "empty symlink target"));
    }
    if link.starts_with('/') {
        return Ok(());
    }
    let mut depth = parent_rel.components().count() as i64;
    for c in Path::new(link).components() {
        match c {
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return Err(refuse(
                        name,
                        format!("symlink target {link:?} resolves outside the root"),
                    ));
                }
            }
            Component::Normal(_) => depth += 1,
            _ => {}
        }
    }
    Ok(())
}

/// Opaque directory: drop whatever lower layers put in it, keeping what
/// this layer already created there.
fn opaque(dir: &Dir, dir_rel: &Path, created: &HashSet<PathBuf>) -> Result<()> {
    for n in dir.entries()? {
        if !created.contains(&dir_rel.join(&n)) {
            dir.remove_all_at(&n)?;
        }
    }
    Ok(())
}

/// Apply `layers` in order on top of `base` (or an empty root) into a
/// staging directory beside `dest`, then rename it to `dest`. The base's
/// files are hard links where it lies on the same filesystem (see
/// [`link_tree`]): an image `FROM` another shares every file it does not
/// change. On any refusal the staging directory is removed: nothing is left
/// behind. When `dest` appeared meanwhile (a concurrent materialisation) it
/// is kept.
pub fn apply_all_atomic(
    base: Option<&Path>,
    layers: &[PathBuf],
    dest: &Path,
    opts: &ApplyOptions,
) -> Result<()> {
    let parent = dest
        .parent()
        .ok_or_else(|| Error::internal("destination without a parent"))?;
    owned::create_dir_all(parent)?;
    let staging = parent.join(format!(
        ".staging-{}-{}",
        std::process::id(),
        unique_suffix()
    ));
    let result = (|| {
        owned::create_dir(&staging)?;
        if let Some(base) = base {
            link_tree(base, &staging)?;
        }
        for l in layers {
            apply_file(l, &staging, opts)?;
        }
        Ok(())
    })();
    if let Err(e) = result {
        let _ = owned::remove_dir_all(&staging);
        return Err(e);
    }
    match owned::rename(&staging, dest) {
        Ok(()) => Ok(()),
        Err(_) if owned::is_dir(dest) => {
            let _ = owned::remove_dir_all(&staging);
            Ok(())
        }
        Err(e) => {
            let _ = owned::remove_dir_all(&staging);
            Err(e.into())
        }
    }
}

/// A per-process unique suffix for temporary names.
pub fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{t:x}-{}", N.fetch_add(1, Ordering::Relaxed))
}

/// Copy a directory tree preserving modes, owners, symlinks and hardlinks
/// (`cp -a`, reflinking where the filesystem can).
pub fn copy_tree(src: &Path, dst: &Path) -> Result<()> {
    cp(src, dst, "--reflink=auto")
}

/// [`copy_tree`], but with every non-directory a hard link to the source's
/// (`cp -a --link`) when both lie on one filesystem: a root made from
/// another shares the files it does not change instead of copying them.
/// Directories are the tree's own. Safe because nothing writes an image's
/// files in place: a layer applied on top replaces an entry (unlink, then
/// create), sandboxes see the root read-only under an overlay, and the
/// microVM disk is made from a copy. Across filesystems it copies.
pub fn link_tree(src: &Path, dst: &Path) -> Result<()> {
    let dev = |p: &Path| owned::metadata(p).map(|m| m.dev());
    let dst_dev = match dev(dst) {
        Ok(d) => d,
        Err(_) => dev(dst.parent().unwrap_or(Path::new("/")))?,
    };
    if dev(src)? == dst_dev {
        cp(src, dst, "--link")
    } else {
        copy_tree(src, dst)
    }
}

fn cp(src: &Path, dst: &Path, how: &str) -> Result<()> {
    let out = std::process::Command::new("cp")
        .arg("-a")
        .arg(how)
        .arg(format!("{}/.", src.display()))
        .arg(dst)
        .output()
        .map_err(|e| Error::internal(format!("cp: {e}")))?;
    if !out.status.success() {
        return Err(Error::internal(format!(
            "copy {} -> {}: {}",
            src.display(),
            dst.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// Write the changes in `dir` (an overlayfs upper directory, or any plain
/// tree) as a zstd-compressed OCI layer at `dest`: overlay whiteouts
/// (character device 0/0) become `.wh.NAME`, opaque directories
/// (`trusted.overlay.opaque=y`) get `.wh..wh..opq`. Returns the layer's
/// digest and compressed size.
pub fn write_layer(dir: &Path, dest: &Path) -> Result<(Digest, u64)> {
    // The upper directory is the tenant's (a RUN step wrote it): it is read
    // through descriptors only; `dest` is the daemon's own temp file.
    let upper = Dir::open(dir, Resolve::NoSymlinks)?;
    let f = owned::create(dest)?;
    let enc = zstd::Encoder::new(f, 3)?;
    let mut b = tar::Builder::new(enc);
    walk(&upper, Path::new(""), &mut b)?;
    let enc = b.into_inner()?;
    let f = enc.finish()?;
    f.sync_all()?;
    let size = f.metadata()?.len();
    Ok((Digest::of_file(dest)?, size))
}

/// A tar header of `kind` with the mode, owners and mtime of `st`.
fn header_of(st: &libc::stat, kind: EntryType, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    h.set_mode(st.st_mode & 0o7777);
    h.set_uid(st.st_uid as u64);
    h.set_gid(st.st_gid as u64);
    h.set_mtime(st.st_mtime.max(0) as u64);
    h.set_size(size);
    h
}

fn walk<W: Write>(dir: &Dir, rel: &Path, b: &mut tar::Builder<W>) -> Result<()> {
    for n in dir.entries()? {
        let r = rel.join(&n);
        let st = dir.lstat_at(&n)?;
        let k = fsroot::kind(&st);
        if k == libc::S_IFCHR && st.st_rdev == 0 {
            let wh = rel.join(format!("{WH_PREFIX}{}", n.to_string_lossy()));
            append_empty(b, &wh)?;
        } else if k == libc::S_IFCHR || k == libc::S_IFBLK || k == libc::S_IFSOCK {
            return Err(Error::invalid(format!(
                "{} is a device node or socket; layers cannot carry it",
                r.display()
            )));
        } else if n.as_bytes().starts_with(WH_PREFIX.as_bytes()) {
            // It would read back as a whiteout and delete instead.
            return Err(Error::invalid(format!(
                "{} is named like a layer whiteout (.wh.); layers cannot carry it",
                r.display()
            )));
        } else if k == libc::S_IFDIR {
            let sub = dir.sub(&n)?;
            let mut h = header_of(&st, EntryType::Directory, 0);
            b.append_data(&mut h, &r, io::empty())?;
            if is_opaque(&sub) {
                append_empty(b, &r.join(WH_OPAQUE))?;
            }
            walk(&sub, &r, b)?;
        } else if k == libc::S_IFLNK {
            let target = dir.read_link_at(&n)?;
            let mut h = header_of(&st, EntryType::Symlink, 0);
            b.append_link(&mut h, &r, &target)?;
        } else if k == libc::S_IFIFO {
            let mut h = header_of(&st, EntryType::Fifo, 0);
            b.append_data(&mut h, &r, io::empty())?;
        } else {
            let f = dir.open_at(&n, libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY, 0)?;
            let st = fsroot::fstat(f.as_fd())?;
            let mut h = header_of(&st, EntryType::Regular, st.st_size as u64);
            b.append_data(&mut h, &r, fs::File::from(f).take(st.st_size as u64))?;
        }
    }
    Ok(())
}

fn append_empty<W: Write>(b: &mut tar::Builder<W>, name: &Path) -> Result<()> {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(EntryType::Regular);
    h.set_size(0);
    h.set_mode(0o644);
    h.set_mtime(0);
    b.append_data(&mut h, name, io::empty())?;
    Ok(())
}

fn is_opaque(dir: &Dir) -> bool {
    let mut buf = [0u8; 4];
    for attr in [
        &b"trusted.overlay.opaque\0"[..],
        &b"user.overlay.opaque\0"[..],
    ] {
        // SAFETY: a valid descriptor, C string and a buffer of the given length.
        let n = unsafe {
            libc::fgetxattr(
                dir.as_fd().as_raw_fd(),
                attr.as_ptr() as *const libc::c_char,
                buf.as_mut_ptr() as *mut libc::c_void,
                buf.len(),
            )
        };
        if n == 1 && buf[0] == b'y' {
            return true;
        }
    }
    false
}

/// Digest of the decompressed stream (an OCI `diff_id`).
pub fn diff_id(layer: &Path) -> Result<Digest> {
    let f = owned::open(layer)?;
    Ok(HashingReader::new(decompress(f)?).finish()?)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // fixtures on the tests' own temp dirs
#[path = "layer_tests.rs"]
pub(crate) mod tests;
