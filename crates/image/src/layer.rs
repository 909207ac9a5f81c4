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
use std::ffi::CString;
use std::fs;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use stasis_core::{Error, ErrorCode, Result};
use tar::EntryType;

use crate::digest::{Digest, HashingReader};

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
    let f = fs::File::open(path)?;
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

/// Apply a layer file (any supported compression) onto `root`.
pub fn apply_file(layer: &Path, root: &Path, opts: &ApplyOptions) -> Result<LayerStats> {
    let f = fs::File::open(layer)
        .map_err(|e| Error::from(e).context(format!("open layer {}", layer.display())))?;
    apply(f, root, opts)
}

/// Apply one layer stream onto `root` (which must exist).
pub fn apply(r: impl Read, root: &Path, opts: &ApplyOptions) -> Result<LayerStats> {
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
    root: &Path,
    opts: &ApplyOptions,
    created: &mut HashSet<PathBuf>,
) -> Result<()> {
    let rel = normalize(name)?;
    let Some(file_name) = rel.file_name().map(|f| f.to_string_lossy().into_owned()) else {
        return Ok(()); // the root itself ("./")
    };
    let parent_rel = rel.parent().unwrap_or(Path::new("")).to_path_buf();
    let parent = ensure_dirs(root, &parent_rel, name, created)?;
    let header = entry.header();
    let kind = header.entry_type();
    let mode = header.mode().map_err(|e| refuse(name, e))?;
    if mode & 0o6000 != 0 && !opts.allow_setid && (kind.is_file() || kind.is_dir()) {
        return Err(refuse(name, "setuid/setgid bit from an untrusted source"));
    }
    if !opts.whiteouts && file_name.starts_with(WH_PREFIX) {
        return Err(refuse(
            name,
            "a name starting with .wh. marks a deletion in an image layer; a plain archive cannot carry it",
        ));
    }
    if file_name == WH_OPAQUE {
        return opaque(&parent, &parent_rel, created);
    }
    if let Some(hidden) = file_name.strip_prefix(WH_PREFIX) {
        if hidden.is_empty() || hidden == "." || hidden == ".." {
            return Err(refuse(name, "malformed whiteout"));
        }
        return remove_any(&parent.join(hidden));
    }
    let target = parent.join(&file_name);
    let uid = header.uid().unwrap_or(0) as u32;
    let gid = header.gid().unwrap_or(0) as u32;
    let mtime = header.mtime().unwrap_or(0) as i64;
    match kind {
        EntryType::Directory => {
            match fs::symlink_metadata(&target) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => {
                    remove_any(&target)?;
                    fs::create_dir(&target)?;
                }
                Err(_) => fs::create_dir(&target)?,
            }
            fs::set_permissions(&target, fs::Permissions::from_mode(mode & 0o7777))?;
            chown(&target, uid, gid)?;
        }
        EntryType::Regular | EntryType::Continuous => {
            remove_any(&target)?;
            let mut f = fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .custom_flags(libc::O_NOFOLLOW)
                .mode(0o600)
                .open(&target)?;
            io::copy(entry, &mut f).map_err(|e| {
                if is_limit(&e) {
                    Error::invalid("decompression limit exceeded")
                } else {
                    refuse(name, e)
                }
            })?;
            drop(f);
            chown(&target, uid, gid)?;
            fs::set_permissions(&target, fs::Permissions::from_mode(mode & 0o7777))?;
            set_mtime(&target, mtime);
        }
        EntryType::Symlink => {
            let link = entry
                .link_name_bytes()
                .ok_or_else(|| refuse(name, "symlink without a target"))?;
            let link = String::from_utf8_lossy(&link).into_owned();
            check_symlink_target(name, &parent_rel, &link)?;
            remove_any(&target)?;
            std::os::unix::fs::symlink(&link, &target)?;
            chown(&target, uid, gid)?;
            set_mtime(&target, mtime);
        }
        EntryType::Link => {
            let link = entry
                .link_name_bytes()
                .ok_or_else(|| refuse(name, "hardlink without a target"))?;
            let link = String::from_utf8_lossy(&link).into_owned();
            let link_rel = normalize(&link)
                .map_err(|_| refuse(name, format!("hardlink target {link:?} leaves the root")))?;
            let src = resolve_existing(root, &link_rel)
                .filter(|p| fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
                .ok_or_else(|| {
                    refuse(
                        name,
                        format!("hardlink target {link:?} is not a regular file inside the root"),
                    )
                })?;
            remove_any(&target)?;
            fs::hard_link(&src, &target)?;
        }
        EntryType::Fifo => {
            remove_any(&target)?;
            let c = CString::new(target.as_os_str().as_bytes())
                .map_err(|_| refuse(name, "NUL in name"))?;
            // SAFETY: c is a valid NUL-terminated path.
            if unsafe { libc::mkfifo(c.as_ptr(), (mode & 0o777) as libc::mode_t) } != 0 {
                return Err(io::Error::last_os_error().into());
            }
            chown(&target, uid, gid)?;
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
fn ensure_dirs(
    root: &Path,
    rel: &Path,
    name: &str,
    created: &mut HashSet<PathBuf>,
) -> Result<PathBuf> {
    let mut cur = root.to_path_buf();
    let mut cur_rel = PathBuf::new();
    for c in rel.components() {
        cur.push(c);
        cur_rel.push(c);
        match fs::symlink_metadata(&cur) {
            Ok(m) if m.is_dir() => {}
            Ok(m) if m.file_type().is_symlink() => {
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
                fs::create_dir(&cur)?;
                fs::set_permissions(&cur, fs::Permissions::from_mode(0o755))?;
                created.insert(cur_rel.clone());
            }
        }
    }
    Ok(cur)
}

/// `root/rel` when every component exists and none is a symlink.
fn resolve_existing(root: &Path, rel: &Path) -> Option<PathBuf> {
    let mut cur = root.to_path_buf();
    for c in rel.components() {
        cur.push(c);
        let m = fs::symlink_metadata(&cur).ok()?;
        if m.file_type().is_symlink() {
            return None;
        }
    }
    Some(cur)
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
fn opaque(dir: &Path, dir_rel: &Path, created: &HashSet<PathBuf>) -> Result<()> {
    for e in fs::read_dir(dir)? {
        let e = e?;
        if !created.contains(&dir_rel.join(e.file_name())) {
            remove_any(&e.path())?;
        }
    }
    Ok(())
}

fn remove_any(p: &Path) -> Result<()> {
    match fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(p)?,
        Ok(_) => fs::remove_file(p)?,
        Err(_) => {}
    }
    Ok(())
}

fn chown(p: &Path, uid: u32, gid: u32) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    std::os::unix::fs::lchown(p, Some(uid), Some(gid))?;
    Ok(())
}

fn set_mtime(p: &Path, secs: i64) {
    let Ok(c) = CString::new(p.as_os_str().as_bytes()) else {
        return;
    };
    let t = libc::timespec {
        tv_sec: secs as libc::time_t,
        tv_nsec: 0,
    };
    let times = [t, t];
    // SAFETY: valid path and two timespecs; failure only loses the mtime.
    unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
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
    fs::create_dir_all(parent)?;
    let staging = parent.join(format!(
        ".staging-{}-{}",
        std::process::id(),
        unique_suffix()
    ));
    let result = (|| {
        fs::create_dir(&staging)?;
        if let Some(base) = base {
            link_tree(base, &staging)?;
        }
        for l in layers {
            apply_file(l, &staging, opts)?;
        }
        Ok(())
    })();
    if let Err(e) = result {
        let _ = fs::remove_dir_all(&staging);
        return Err(e);
    }
    match fs::rename(&staging, dest) {
        Ok(()) => Ok(()),
        Err(_) if dest.is_dir() => {
            let _ = fs::remove_dir_all(&staging);
            Ok(())
        }
        Err(e) => {
            let _ = fs::remove_dir_all(&staging);
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
    let dev = |p: &Path| fs::metadata(p).map(|m| m.dev());
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
    let f = fs::File::create(dest)?;
    let enc = zstd::Encoder::new(f, 3)?;
    let mut b = tar::Builder::new(enc);
    b.follow_symlinks(false);
    walk(dir, Path::new(""), &mut b)?;
    let enc = b.into_inner()?;
    enc.finish()?.sync_all()?;
    let size = fs::metadata(dest)?.len();
    Ok((Digest::of_file(dest)?, size))
}

fn walk<W: Write>(base: &Path, rel: &Path, b: &mut tar::Builder<W>) -> Result<()> {
    let mut names: Vec<_> = fs::read_dir(base.join(rel))?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<io::Result<_>>()?;
    names.sort();
    for n in names {
        let r = rel.join(&n);
        let full = base.join(&r);
        let m = fs::symlink_metadata(&full)?;
        let ft = m.file_type();
        use std::os::unix::fs::FileTypeExt;
        if ft.is_char_device() && m.rdev() == 0 {
            let wh = rel.join(format!("{WH_PREFIX}{}", n.to_string_lossy()));
            append_empty(b, &wh)?;
        } else if ft.is_char_device() || ft.is_block_device() || ft.is_socket() {
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
        } else if ft.is_dir() {
            b.append_path_with_name(&full, &r)?;
            if is_opaque(&full) {
                append_empty(b, &r.join(WH_OPAQUE))?;
            }
            walk(base, &r, b)?;
        } else {
            b.append_path_with_name(&full, &r)?;
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

fn is_opaque(dir: &Path) -> bool {
    let Ok(c) = CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    let mut buf = [0u8; 4];
    for attr in [
        &b"trusted.overlay.opaque\0"[..],
        &b"user.overlay.opaque\0"[..],
    ] {
        // SAFETY: valid C strings and a buffer of the given length.
        let n = unsafe {
            libc::lgetxattr(
                c.as_ptr(),
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
    let f = fs::File::open(layer)?;
    Ok(HashingReader::new(decompress(f)?).finish()?)
}

#[cfg(test)]
#[path = "layer_tests.rs"]
pub(crate) mod tests;
