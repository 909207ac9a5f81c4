//! The build context of a Dockerfile: paths that cannot leave it, the digest
//! of a step's sources (its cache input), and `COPY`/`ADD` of its files into
//! a step's change directory.
//!
//! `ADD` follows Docker: a source that is a local tar archive (plain, gzip,
//! bzip2, xz, and zstd too; recognised by its content, not its name) is
//! unpacked into the destination directory, through the same safe
//! application as a layer ([`layer::apply_file`]: no escapes, device nodes,
//! setuid/setgid files from a tenant, or more than the layer limit
//! unpacked; `.wh.` names refused). Any other file is copied as `COPY`
//! would. A URL never reaches here: the parser refuses it, as the build has
//! no network but its RUN steps' policy.

use std::ffi::{OsStr, OsString};
// Only as a type around descriptors `fsroot` opened (`File::from(OwnedFd)`):
// no path is opened here.
use std::fs::File;
use std::io::{self, Seek};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use stasis_core::{Error, Result};
use stasis_fsroot::{fchmod, fchown, fstat, is_root, kind, Dir, Resolve};

use crate::digest::{Digest, Hasher};
use crate::layer::{self, ApplyOptions};

/// Make `abs` (an absolute path in the image) a directory in the layer
/// being assembled (`upper`), each component mode 0755. A component that
/// exists as anything but a directory (a symlink an earlier source put
/// there) is refused, never followed.
pub(crate) fn make_dirs(upper: &Dir, abs: &str) -> Result<Dir> {
    let mut cur = upper.with_resolve(Resolve::NoSymlinks)?;
    for c in Path::new(abs).components() {
        let Component::Normal(name) = c else {
            continue;
        };
        match cur.lstat_at(name) {
            Ok(st) if kind(&st) == libc::S_IFDIR => {}
            Ok(_) => {
                return Err(Error::invalid(format!(
                    "{abs}: {} is not a directory in this step's layer (an earlier source put a file or symlink there)",
                    name.to_string_lossy()
                )))
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOENT) => cur.mkdir_at(name, 0o755)?,
            Err(e) => return Err(e.into()),
        }
        let sub = cur.sub(name)?;
        fchmod(sub.as_fd(), 0o755)?;
        cur = sub;
    }
    Ok(cur)
}

/// `abs` (an absolute path in the image) with every component that is a
/// symlink in `root` followed the way the sandbox will see it: inside the
/// root, `..` stopping at `/`. A destination under `/bin` on a merged-/usr
/// Debian lands in `/usr/bin` as Docker puts it, instead of a directory
/// `bin` in the layer that would replace the image's `/bin` symlink. With
/// `keep_last`, the last component is left as written (a file to create).
/// Links are read with `readlinkat` in directories opened without
/// following any link, so nothing outside the root is ever looked at.
pub(crate) fn resolve_in_root(root: &Dir, abs: &str, keep_last: bool) -> String {
    let root = match root.with_resolve(Resolve::NoSymlinks) {
        Ok(r) => r,
        Err(_) => return abs.to_string(),
    };
    let mut queue: std::collections::VecDeque<String> = abs
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .map(str::to_string)
        .collect();
    let last = if keep_last { queue.pop_back() } else { None };
    let mut out: Vec<String> = Vec::new();
    let mut hops = 0;
    while let Some(c) = queue.pop_front() {
        if c == ".." {
            out.pop();
            continue;
        }
        let link = root
            .open_dir(Path::new(&out.join("/")))
            .and_then(|d| d.read_link_at(OsStr::new(&c)));
        match link {
            // Linux's own bound on symlinks followed in one lookup.
            Ok(target) if hops < 40 => {
                hops += 1;
                let t = target.to_string_lossy().into_owned();
                if t.starts_with('/') {
                    out.clear();
                }
                for part in t.split('/').rev().filter(|c| !c.is_empty() && *c != ".") {
                    queue.push_front(part.to_string());
                }
            }
            _ => out.push(c),
        }
    }
    out.extend(last);
    format!("/{}", out.join("/"))
}

/// `--chown=UID[:GID]`, numeric.
pub(crate) fn parse_chown(s: &str) -> std::result::Result<(u32, u32), String> {
    let (u, g) = s.split_once(':').unwrap_or((s, s));
    match (u.parse(), g.parse()) {
        (Ok(u), Ok(g)) => Ok((u, g)),
        _ => Err(format!("--chown={s}: only numeric UID[:GID] is supported")),
    }
}

/// A source as found in the context: symlinks on the way (and the source
/// itself) are followed only while they stay inside it.
enum Source {
    Dir(Dir),
    File(File),
}

/// The context directory, opened so that every lookup stays beneath it.
pub(crate) fn open_context(context: &Path) -> Result<Dir> {
    Dir::open(context, Resolve::Beneath).map_err(|e| Error::invalid(format!("build context: {e}")))
}

/// A source path inside the context: no `..` out of it, no absolute path,
/// and no symlink that leads out of it. Returns the source and the name
/// it is copied under into a directory.
fn context_source(context: &Dir, src: &str) -> Result<(Source, OsString)> {
    let mut rel = PathBuf::new();
    for c in Path::new(src).components() {
        match c {
            Component::Normal(p) => rel.push(p),
            Component::CurDir => {}
            Component::RootDir => {}
            _ => return Err(Error::invalid(format!("{src:?} leaves the build context"))),
        }
    }
    let fd = context
        .open_path(&rel, libc::O_PATH, 0)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::EXDEV) => Error::invalid(format!("{src:?} leaves the build context")),
            _ => Error::invalid(format!("{src:?} is not in the build context")),
        })?;
    let st = fstat(fd.as_fd())?;
    let name = rel.file_name().unwrap_or_default().to_os_string();
    let reopen = |flags| {
        context
            .open_path(&rel, flags, 0)
            .map_err(|e| Error::invalid(format!("{src:?}: {e}")))
    };
    let source = match kind(&st) {
        libc::S_IFDIR => Source::Dir(Dir::from_fd(
            reopen(libc::O_RDONLY | libc::O_DIRECTORY)?,
            Resolve::NoSymlinks,
        )),
        libc::S_IFREG => Source::File(File::from(reopen(libc::O_RDONLY | libc::O_NONBLOCK)?)),
        _ => {
            return Err(Error::invalid(format!(
                "{src:?} is not a file, directory or symlink"
            )))
        }
    };
    Ok((source, name))
}

/// The largest Dockerfile read from a context.
pub const MAX_DOCKERFILE_BYTES: u64 = 1 << 20;

/// The Dockerfile of an unpacked context: the first of `names` that is a
/// regular file directly in it. A symlink is not followed (a context cannot
/// point the build at a file of the host). `internal` (a name the client
/// put the Dockerfile under) is taken out of the context afterwards, so
/// COPY never sees it.
pub fn take_dockerfile(context: &Path, names: &[&str], internal: &str) -> Result<Option<String>> {
    let ctx = open_context(context)?;
    let mut found = None;
    for n in names {
        let Ok(fd) = open_entry(&ctx, OsStr::new(n)) else {
            continue;
        };
        let mut text = String::new();
        io::Read::read_to_string(
            &mut io::Read::take(File::from(fd), MAX_DOCKERFILE_BYTES + 1),
            &mut text,
        )
        .map_err(|e| Error::invalid(format!("{n}: {e}")).with_field("dockerfile"))?;
        if text.len() as u64 > MAX_DOCKERFILE_BYTES {
            return Err(
                Error::invalid(format!("{n} is larger than {MAX_DOCKERFILE_BYTES} bytes"))
                    .with_field("dockerfile"),
            );
        }
        found = Some(text);
        break;
    }
    let _ = ctx.remove_all_at(OsStr::new(internal));
    Ok(found)
}

/// Digest of the sources: relative names, modes, contents, link targets.
pub(crate) fn hash_sources(context: &Path, srcs: &[String]) -> Result<Digest> {
    fn file(h: &mut Hasher, f: &File) -> Result<()> {
        let mut buf = Vec::new();
        io::Read::read_to_end(&mut &*f, &mut buf)?;
        h.field(&buf);
        Ok(())
    }
    fn dir(h: &mut Hasher, d: &Dir, rel: &str) -> Result<()> {
        for n in d.entries()? {
            let st = d.lstat_at(&n)?;
            let r = format!("{rel}/{}", n.to_string_lossy());
            h.field(r.as_bytes());
            h.field(&st.st_mode.to_le_bytes());
            match kind(&st) {
                libc::S_IFLNK => h.field(d.read_link_at(&n)?.as_bytes()),
                libc::S_IFDIR => dir(h, &d.sub(&n)?, &r)?,
                _ => file(h, &File::from(open_entry(d, &n)?))?,
            }
        }
        Ok(())
    }
    let ctx = open_context(context)?;
    let mut h = Hasher::default();
    for s in srcs {
        let (src, _) = context_source(&ctx, s)?;
        h.field(s.as_bytes());
        match src {
            Source::Dir(d) => {
                h.field(&d.stat_self()?.st_mode.to_le_bytes());
                dir(&mut h, &d, s)?
            }
            Source::File(f) => {
                h.field(&fstat(f.as_fd())?.st_mode.to_le_bytes());
                file(&mut h, &f)?
            }
        }
    }
    Ok(h.finish())
}

/// A regular file `name` in `d`, opened without following a link or
/// blocking on a FIFO; anything else is refused.
fn open_entry(d: &Dir, name: &OsStr) -> Result<OwnedFd> {
    let fd = d.open_at(name, libc::O_RDONLY | libc::O_NONBLOCK | libc::O_NOCTTY, 0)?;
    if kind(&fstat(fd.as_fd())?) != libc::S_IFREG {
        return Err(Error::invalid(format!(
            "{} is not a file, directory or symlink",
            name.to_string_lossy()
        )));
    }
    Ok(fd)
}

/// Copy sources into the layer `upper` at `dest` with Docker's rules: a
/// directory's contents go into `dest`; several sources or a `dest/` make
/// `dest` a directory. Symlinks inside are copied as symlinks, never
/// followed, and nothing is written through one: an entry a later source
/// would put where an earlier one left a symlink replaces the link (a file)
/// or is refused (a directory). With `add` (an `ADD`, under these limits),
/// a source that is a tar archive is unpacked into `dest` as a directory
/// instead; its entries keep the archive's owners unless `--chown` names one.
pub(crate) fn copy_sources(
    context: &Path,
    srcs: &[String],
    upper: &Path,
    dest: &str,
    owner: Option<(u32, u32)>,
    add: Option<&ApplyOptions>,
) -> Result<()> {
    let ctx = open_context(context)?;
    let upper = Dir::open(upper, Resolve::NoSymlinks)?;
    let dest_is_dir = dest.ends_with('/') || srcs.len() > 1;
    let dest_rel = Path::new(dest.trim_start_matches('/').trim_end_matches('/'));
    let owner_or_root = owner.unwrap_or((0, 0));
    for s in srcs {
        let (src, name) = context_source(&ctx, s)?;
        match src {
            Source::File(mut f) => {
                if let Some(opts) = add {
                    if layer::is_tar_reader(&f)? {
                        f.rewind()?;
                        unpack(f, s, &upper, dest, opts, owner)?;
                        continue;
                    }
                    f.rewind()?;
                }
                let (parent, file_name) = if dest_is_dir || dest_rel.as_os_str().is_empty() {
                    (dest_rel, name.as_os_str())
                } else {
                    (
                        dest_rel.parent().unwrap_or(Path::new("")),
                        dest_rel.file_name().unwrap_or_default(),
                    )
                };
                let d = make_dirs(&upper, &parent.to_string_lossy())?;
                copy_file(&f, &d, file_name, owner_or_root)?;
            }
            Source::Dir(src) => {
                let d = make_dirs(&upper, &dest_rel.to_string_lossy())?;
                if !dest_rel.as_os_str().is_empty() {
                    fchmod(d.as_fd(), src.stat_self()?.st_mode)?;
                    if is_root() {
                        fchown(d.as_fd(), owner_or_root.0, owner_or_root.1)?;
                    }
                }
                copy_dir(&src, &d, owner_or_root)?;
            }
        }
    }
    Ok(())
}

/// `ADD` of a local archive: unpacked into the directory `dest` with the
/// layer rules for a plain archive (an error names the archive and the
/// entry, and keeps its code: 413 for past the limit).
fn unpack(
    archive: File,
    src: &str,
    upper: &Dir,
    dest: &str,
    opts: &ApplyOptions,
    owner: Option<(u32, u32)>,
) -> Result<()> {
    let dir = make_dirs(upper, dest)?;
    layer::apply_at(archive, &dir, &opts.plain()).map_err(|e| Error {
        message: format!("archive {src:?}: {}", e.message),
        ..e
    })?;
    if let Some(o) = owner {
        chown_tree(&dir, o)?;
    }
    Ok(())
}

fn chown_tree(d: &Dir, (uid, gid): (u32, u32)) -> Result<()> {
    if !is_root() {
        return Ok(());
    }
    fchown(d.as_fd(), uid, gid)?;
    for n in d.entries()? {
        if kind(&d.lstat_at(&n)?) == libc::S_IFDIR {
            chown_tree(&d.sub(&n)?, (uid, gid))?;
        } else {
            d.chown_at(&n, uid, gid)?;
        }
    }
    Ok(())
}

/// Why an entry of the layer cannot take a source's entry of another kind.
fn occupied(name: &OsStr, what: &str) -> Error {
    Error::invalid(format!(
        "{}: an earlier source put a non-directory here; {what} is not copied through it",
        name.to_string_lossy()
    ))
}

/// `name` in `dst` made ready for a non-directory: an existing file or
/// symlink is removed (replaced, never written through); a directory stays
/// and is refused.
fn clear_for_file(dst: &Dir, name: &OsStr) -> Result<()> {
    match dst.lstat_at(name) {
        Ok(st) if kind(&st) == libc::S_IFDIR => Err(Error::invalid(format!(
            "{}: a directory is already there; a file is not copied over it",
            name.to_string_lossy()
        ))),
        Ok(_) => Ok(dst.unlink_at(name)?),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn copy_file(src: &File, dst: &Dir, name: &OsStr, (uid, gid): (u32, u32)) -> Result<()> {
    let mode = fstat(src.as_fd())?.st_mode;
    clear_for_file(dst, name)?;
    let out = dst.open_at(name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o600)?;
    let mut out = File::from(out);
    io::copy(&mut &*src, &mut out)?;
    if is_root() {
        fchown(out.as_fd(), uid, gid)?;
    }
    fchmod(out.as_fd(), mode)?;
    Ok(())
}

/// The entries of `src` into the directory `dst`, recursively.
fn copy_dir(src: &Dir, dst: &Dir, owner: (u32, u32)) -> Result<()> {
    for n in src.entries()? {
        let st = src.lstat_at(&n)?;
        match kind(&st) {
            libc::S_IFLNK => {
                clear_for_file(dst, &n)?;
                dst.symlink_at(&src.read_link_at(&n)?, &n)?;
                if is_root() {
                    dst.chown_at(&n, owner.0, owner.1)?;
                }
            }
            libc::S_IFDIR => {
                match dst.lstat_at(&n) {
                    Ok(d) if kind(&d) == libc::S_IFDIR => {}
                    Ok(_) => return Err(occupied(&n, "a directory")),
                    Err(e) if e.raw_os_error() == Some(libc::ENOENT) => dst.mkdir_at(&n, 0o700)?,
                    Err(e) => return Err(e.into()),
                }
                let sub = dst.sub(&n)?;
                fchmod(sub.as_fd(), st.st_mode)?;
                if is_root() {
                    fchown(sub.as_fd(), owner.0, owner.1)?;
                }
                copy_dir(&src.sub(&n)?, &sub, owner)?;
            }
            libc::S_IFREG => copy_file(&File::from(open_entry(src, &n)?), dst, &n, owner)?,
            _ => {
                return Err(Error::invalid(format!(
                    "{} is not a file, directory or symlink",
                    n.to_string_lossy()
                )))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // fixtures on the tests' own temp dirs
#[path = "context_tests.rs"]
mod tests;
