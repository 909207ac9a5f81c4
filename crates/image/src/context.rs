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

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use stasis_core::{Error, Result};

use crate::digest::{Digest, Hasher};
use crate::layer::{self, ApplyOptions};

/// Make `abs` (an absolute path in the image) a directory under `upper`,
/// each component mode 0755.
pub(crate) fn make_dirs(upper: &Path, abs: &str) -> Result<()> {
    let p = upper.join(abs.trim_start_matches('/'));
    fs::create_dir_all(&p)?;
    let mut cur = upper.to_path_buf();
    for c in Path::new(abs.trim_start_matches('/')).components() {
        cur.push(c);
        fs::set_permissions(&cur, fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// `abs` (an absolute path in the image) with every component that is a
/// symlink in `root` followed the way the sandbox will see it: inside the
/// root, `..` stopping at `/`. A destination under `/bin` on a merged-/usr
/// Debian lands in `/usr/bin` as Docker puts it, instead of a directory
/// `bin` in the layer that would replace the image's `/bin` symlink. With
/// `keep_last`, the last component is left as written (a file to create).
pub(crate) fn resolve_in_root(root: &Path, abs: &str, keep_last: bool) -> String {
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
        let p = root.join(out.join("/")).join(&c);
        match fs::read_link(&p) {
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

/// A source path inside the context: no `..` out of it, no absolute path,
/// and its canonical form (symlinks followed) must stay inside too.
fn context_path(context: &Path, src: &str) -> Result<PathBuf> {
    let mut rel = PathBuf::new();
    for c in Path::new(src).components() {
        match c {
            Component::Normal(p) => rel.push(p),
            Component::CurDir => {}
            Component::RootDir => {}
            _ => return Err(Error::invalid(format!("{src:?} leaves the build context"))),
        }
    }
    let p = context.join(&rel);
    let canon = p
        .canonicalize()
        .map_err(|_| Error::invalid(format!("{src:?} is not in the build context")))?;
    if !canon.starts_with(context) {
        return Err(Error::invalid(format!(
            "{src:?} leaves the build context (it resolves to {})",
            canon.display()
        )));
    }
    Ok(canon)
}

/// Digest of the sources: relative names, modes, contents, link targets.
pub(crate) fn hash_sources(context: &Path, srcs: &[String]) -> Result<Digest> {
    fn walk(h: &mut Hasher, p: &Path, rel: &str) -> Result<()> {
        let m = fs::symlink_metadata(p)?;
        h.field(rel.as_bytes());
        h.field(&m.mode().to_le_bytes());
        if m.file_type().is_symlink() {
            h.field(fs::read_link(p)?.as_os_str().as_encoded_bytes());
        } else if m.is_dir() {
            let mut names: Vec<_> = fs::read_dir(p)?
                .map(|e| e.map(|e| e.file_name()))
                .collect::<std::io::Result<_>>()?;
            names.sort();
            for n in names {
                walk(h, &p.join(&n), &format!("{rel}/{}", n.to_string_lossy()))?;
            }
        } else {
            h.field(&fs::read(p)?);
        }
        Ok(())
    }
    let mut h = Hasher::default();
    for s in srcs {
        let p = context_path(context, s)?;
        walk(&mut h, &p, s)?;
    }
    Ok(h.finish())
}

/// Copy sources into `upper` at `dest` with Docker's rules: a directory's
/// contents go into `dest`; several sources or a `dest/` make `dest` a
/// directory. Symlinks inside are copied as symlinks, never followed. With
/// `add` (an `ADD`, under these limits), a source that is a tar archive is
/// unpacked into `dest` as a directory instead; its entries keep the
/// archive's owners unless `--chown` names one.
pub(crate) fn copy_sources(
    context: &Path,
    srcs: &[String],
    upper: &Path,
    dest: &str,
    owner: Option<(u32, u32)>,
    add: Option<&ApplyOptions>,
) -> Result<()> {
    let dest_is_dir = dest.ends_with('/') || srcs.len() > 1;
    let dest_rel = dest.trim_start_matches('/').trim_end_matches('/');
    for s in srcs {
        let p = context_path(context, s)?;
        if let Some(opts) = add {
            if p.is_file() && layer::is_tar(&p)? {
                unpack(&p, s, upper, dest, opts, owner)?;
                continue;
            }
        }
        let target = if p.is_dir() {
            upper.join(dest_rel)
        } else if dest_is_dir {
            upper.join(dest_rel).join(p.file_name().unwrap_or_default())
        } else {
            upper.join(dest_rel)
        };
        if let Some(parent) = target.parent() {
            make_dirs(
                upper,
                &parent
                    .strip_prefix(upper)
                    .unwrap_or(Path::new(""))
                    .to_string_lossy(),
            )?;
        }
        copy_rec(&p, &target, owner.unwrap_or((0, 0)))?;
    }
    Ok(())
}

/// `ADD` of a local archive: unpacked into the directory `dest` with the
/// layer rules for a plain archive (an error names the archive and the
/// entry, and keeps its code: 413 for past the limit).
fn unpack(
    archive: &Path,
    src: &str,
    upper: &Path,
    dest: &str,
    opts: &ApplyOptions,
    owner: Option<(u32, u32)>,
) -> Result<()> {
    make_dirs(upper, dest)?;
    let dir = upper.join(dest.trim_start_matches('/'));
    layer::apply_file(archive, &dir, &opts.plain()).map_err(|e| Error {
        message: format!("archive {src:?}: {}", e.message),
        ..e
    })?;
    if let Some(o) = owner {
        chown_tree(&dir, o)?;
    }
    Ok(())
}

fn chown_tree(p: &Path, (uid, gid): (u32, u32)) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Ok(());
    }
    std::os::unix::fs::lchown(p, Some(uid), Some(gid))?;
    if fs::symlink_metadata(p)?.is_dir() {
        for e in fs::read_dir(p)? {
            chown_tree(&e?.path(), (uid, gid))?;
        }
    }
    Ok(())
}

fn copy_rec(src: &Path, dst: &Path, (uid, gid): (u32, u32)) -> Result<()> {
    let m = fs::symlink_metadata(src)?;
    if m.file_type().is_symlink() {
        let _ = fs::remove_file(dst);
        std::os::unix::fs::symlink(fs::read_link(src)?, dst)?;
    } else if m.is_dir() {
        fs::create_dir_all(dst)?;
        fs::set_permissions(dst, fs::Permissions::from_mode(m.mode() & 0o7777))?;
        for e in fs::read_dir(src)? {
            let e = e?;
            copy_rec(&e.path(), &dst.join(e.file_name()), (uid, gid))?;
        }
    } else if m.is_file() {
        fs::copy(src, dst)?;
        fs::set_permissions(dst, fs::Permissions::from_mode(m.mode() & 0o7777))?;
    } else {
        return Err(Error::invalid(format!(
            "{} is not a file, directory or symlink",
            src.display()
        )));
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        std::os::unix::fs::lchown(dst, Some(uid), Some(gid))?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "context_tests.rs"]
mod tests;
