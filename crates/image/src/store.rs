//! The image store: content-addressed layers stored once, images by digest,
//! and names (`name[:tag]`) per owner -- a tenant or the operator (public).
//!
//! Layout under the store's root:
//! - `layers/<hex>`: layer blobs named by their sha256 (deduplicated);
//! - `images/<hex>/image.json`: an image's record (layers, sizes, config,
//!   build log); `images/<hex>/rootfs/`: its materialised root directory;
//! - `refs/<owner>/<name>/<tag>`: a name pointing at an image digest;
//! - `cache/<hex>.json`: build-step cache entries;
//! - `tmp/`: staging for uploads and builds; `lock`: builds and commits hold
//!   it shared, GC exclusive.
//!
//! Every write is a temp file or directory renamed into place, so concurrent
//! builds of the same image never see a half-written entry.

use std::collections::HashSet;
use std::fs;
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use stasis_core::{Error, ErrorCode, Result};

use stasis_fsroot::{kind, Dir, Resolve};

use crate::digest::{Digest, Hasher};
use crate::layer::{self, ApplyOptions};
use crate::owned;

/// Who owns a name: the operator (visible to everyone) or one tenant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Owner {
    Public,
    Tenant(String),
}

impl Owner {
    fn dir(&self) -> String {
        match self {
            Owner::Public => "_public".into(),
            Owner::Tenant(t) => format!("t-{t}"),
        }
    }
    pub fn label(&self) -> &str {
        match self {
            Owner::Public => "public",
            Owner::Tenant(t) => t,
        }
    }
}

/// The runtime defaults an image carries (from an OCI config or the
/// Dockerfile's ENV/WORKDIR/USER/ENTRYPOINT/CMD).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageConfig {
    #[serde(default)]
    pub env: Vec<String>,
    #[serde(default)]
    pub working_dir: String,
    #[serde(default)]
    pub user: String,
    #[serde(default)]
    pub entrypoint: Option<Vec<String>>,
    #[serde(default)]
    pub cmd: Option<Vec<String>>,
}

impl ImageConfig {
    /// Set (or replace) `KEY=value` in `env`.
    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env
            .retain(|e| e.split_once('=').map(|(k, _)| k) != Some(key));
        self.env.push(format!("{key}={value}"));
    }
    pub fn get_env(&self, key: &str) -> Option<String> {
        self.env.iter().find_map(|e| {
            e.split_once('=')
                .filter(|(k, _)| *k == key)
                .map(|(_, v)| v.to_string())
        })
    }
    /// The default session command: entrypoint + cmd.
    pub fn default_command(&self) -> Vec<String> {
        let mut v = self.entrypoint.clone().unwrap_or_default();
        v.extend(self.cmd.clone().unwrap_or_default());
        v
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerRef {
    pub digest: Digest,
    /// Stored (compressed) size in bytes.
    pub size: u64,
}

/// `image.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ImageRecord {
    pub id: Digest,
    /// An operator-registered host directory under the layers (read-only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_dir: Option<PathBuf>,
    pub layers: Vec<LayerRef>,
    pub config: ImageConfig,
    /// Bytes of the materialised root directory (0 for a registered dir).
    #[serde(default)]
    pub rootfs_bytes: u64,
    #[serde(default)]
    pub created_unix: u64,
    #[serde(default)]
    pub build_log: Vec<String>,
}

/// A resolved image.
#[derive(Debug, Clone)]
pub struct Image {
    pub record: ImageRecord,
    /// The root directory a sandbox uses read-only.
    pub rootfs: PathBuf,
    /// `images/<hex>/` (per-image caches, e.g. a qcow2 disk, live here).
    pub dir: PathBuf,
}

/// One name in a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageName {
    pub name: String,
    pub tag: String,
    pub owner: String,
    pub id: Digest,
}

/// A build-step cache entry.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CacheEntry {
    pub layer: Option<LayerRef>,
    pub config: ImageConfig,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GcReport {
    pub images_removed: u64,
    pub layers_removed: u64,
    pub bytes_freed: u64,
}

/// A parsed reference: `name[:tag]` or `sha256:<hex>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    Name { name: String, tag: String },
    Digest(Digest),
}

fn valid_part(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

impl Reference {
    pub fn parse(s: &str) -> Result<Reference> {
        if s.starts_with("sha256:") {
            return Ok(Reference::Digest(Digest::parse(s)?));
        }
        let (name, tag) = s.split_once(':').unwrap_or((s, "latest"));
        if !valid_part(name) || !valid_part(tag) {
            return Err(Error::invalid(format!(
                "{s:?} is not an image reference (name[:tag] with [A-Za-z0-9._-], or sha256:<hex>)"
            ))
            .with_field("image"));
        }
        Ok(Reference::Name {
            name: name.into(),
            tag: tag.into(),
        })
    }
}

impl std::fmt::Display for Reference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reference::Name { name, tag } => write!(f, "{name}:{tag}"),
            Reference::Digest(d) => write!(f, "{d}"),
        }
    }
}

/// A held lock on the store (released on drop).
pub struct StoreLock(#[allow(dead_code)] fs::File);

pub struct ImageStore {
    root: PathBuf,
}

impl ImageStore {
    pub fn open(root: &Path) -> Result<ImageStore> {
        for d in ["layers", "images", "refs", "cache", "tmp"] {
            owned::create_dir_all(root.join(d))?;
        }
        Ok(ImageStore {
            root: root.to_path_buf(),
        })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A fresh directory under `tmp/` for staging work.
    pub fn temp_dir(&self, what: &str) -> Result<PathBuf> {
        let p = self.root.join("tmp").join(format!(
            "{what}-{}-{}",
            std::process::id(),
            layer::unique_suffix()
        ));
        owned::create_dir(&p)?;
        Ok(p)
    }

    fn lock(&self, op: libc::c_int) -> Result<StoreLock> {
        let f = owned::open_with(
            fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true),
            self.root.join("lock"),
        )?;
        // SAFETY: a valid open fd.
        if unsafe { libc::flock(f.as_raw_fd(), op) } != 0 {
            return Err(std::io::Error::last_os_error().into());
        }
        Ok(StoreLock(f))
    }
    /// Held by builds, imports and commits.
    pub fn lock_shared(&self) -> Result<StoreLock> {
        self.lock(libc::LOCK_SH)
    }
    /// Held by GC.
    pub fn lock_exclusive(&self) -> Result<StoreLock> {
        self.lock(libc::LOCK_EX)
    }

    pub fn layer_path(&self, d: &Digest) -> PathBuf {
        self.root.join("layers").join(d.hex())
    }

    /// Move a layer file into the store under its digest; a layer already
    /// stored is kept and `src` dropped (stored once).
    pub fn put_layer(&self, src: &Path) -> Result<LayerRef> {
        let digest = Digest::of_file(src)?;
        let size = owned::metadata(src)?.len();
        let dest = self.layer_path(&digest);
        if owned::exists(&dest) {
            let _ = owned::remove_file(src);
        } else {
            owned::rename(src, &dest)?;
        }
        Ok(LayerRef { digest, size })
    }

    fn write_atomic(&self, dest: &Path, bytes: &[u8]) -> Result<()> {
        let tmp = self.root.join("tmp").join(format!(
            ".w-{}-{}",
            std::process::id(),
            layer::unique_suffix()
        ));
        owned::write(&tmp, bytes)?;
        owned::rename(&tmp, dest)?;
        Ok(())
    }

    /// Record an image (materialising its root directory once) and point
    /// `owner`'s `name:tag` at it.
    #[allow(clippy::too_many_arguments)]
    pub fn commit(
        &self,
        owner: &Owner,
        name: &str,
        tag: &str,
        base_dir: Option<&Path>,
        layers: Vec<LayerRef>,
        config: ImageConfig,
        build_log: Vec<String>,
        opts: &ApplyOptions,
    ) -> Result<Image> {
        if let Reference::Digest(_) = Reference::parse(&format!("{name}:{tag}"))? {
            return Err(Error::invalid("an image name cannot be a digest"));
        }
        let mut h = Hasher::default();
        h.field(b"stasis-image-v1");
        h.field(
            base_dir
                .map(|p| p.as_os_str().as_encoded_bytes())
                .unwrap_or(b""),
        );
        for l in &layers {
            h.field(l.digest.as_str().as_bytes());
        }
        h.field(&serde_json::to_vec(&config)?);
        let id = h.finish();
        let dir = self.root.join("images").join(id.hex());
        owned::create_dir_all(&dir)?;
        let rootfs_dir = dir.join("rootfs");
        if (base_dir.is_none() || !layers.is_empty()) && !owned::is_dir(&rootfs_dir) {
            // On the root of the nearest stored ancestor (the image built
            // FROM, a shared base layer), linked, plus the layers it lacks.
            let (start, done) = match self.nearest_root(base_dir, &layers) {
                Some((root, n)) => (Some(root), n),
                None => (base_dir.map(Path::to_path_buf), 0),
            };
            let paths: Vec<PathBuf> = layers[done..]
                .iter()
                .map(|l| self.layer_path(&l.digest))
                .collect();
            layer::apply_all_atomic(start.as_deref(), &paths, &rootfs_dir, opts)?;
        }
        let rootfs_bytes = if owned::is_dir(&rootfs_dir) {
            tree_bytes(&rootfs_dir)
        } else {
            0
        };
        let record = ImageRecord {
            id: id.clone(),
            base_dir: base_dir.map(Path::to_path_buf),
            layers,
            config,
            rootfs_bytes,
            created_unix: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            build_log,
        };
        self.write_atomic(
            &dir.join("image.json"),
            &serde_json::to_vec_pretty(&record)?,
        )?;
        let refdir = self.root.join("refs").join(owner.dir()).join(name);
        owned::create_dir_all(&refdir)?;
        self.write_atomic(&refdir.join(tag), id.as_str().as_bytes())?;
        self.image(&id)
    }

    /// The materialised root of a stored image with the same base directory
    /// whose layers are the longest leading part of `layers` (at least
    /// one), and how many layers it has: a new root starts from it (see
    /// [`layer::link_tree`]) and applies only the rest. Callers hold the
    /// store's shared lock, so GC cannot remove it meanwhile; a root exists
    /// only once complete (renamed into place).
    fn nearest_root(
        &self,
        base_dir: Option<&Path>,
        layers: &[LayerRef],
    ) -> Option<(PathBuf, usize)> {
        let mut best: Option<(PathBuf, usize)> = None;
        for e in owned::read_dir(self.root.join("images")).ok()?.flatten() {
            let root = e.path().join("rootfs");
            let Ok(bytes) = owned::read(e.path().join("image.json")) else {
                continue;
            };
            let Ok(rec) = serde_json::from_slice::<ImageRecord>(&bytes) else {
                continue;
            };
            let n = rec.layers.len();
            let better = n > best.as_ref().map_or(0, |b| b.1);
            if better
                && n <= layers.len()
                && rec.base_dir.as_deref() == base_dir
                && rec.layers[..] == layers[..n]
                && owned::is_dir(&root)
            {
                best = Some((root, n));
            }
        }
        best
    }

    /// At daemon start, before any build or import runs: drop what a crash
    /// left in `tmp/` and the names of build steps' temporary images
    /// (`_build-*`), so their content goes at the next GC.
    pub fn clean_stale(&self) -> Result<u64> {
        let mut n = 0;
        for e in owned::read_dir(self.root.join("tmp"))? {
            let p = e?.path();
            let _ = if owned::is_dir(&p) {
                owned::remove_dir_all(&p)
            } else {
                owned::remove_file(&p)
            };
            n += 1;
        }
        for owner in owned::read_dir(self.root.join("refs"))? {
            for name in owned::read_dir(owner?.path())? {
                let name = name?;
                if name.file_name().to_string_lossy().starts_with("_build-") {
                    owned::remove_dir_all(name.path())?;
                    n += 1;
                }
            }
        }
        Ok(n)
    }

    /// Remove an image's directory at once (a build step's temporary image,
    /// which no name points at any more).
    pub fn discard(&self, id: &Digest) -> Result<()> {
        let dir = self.root.join("images").join(id.hex());
        if owned::is_dir(&dir) {
            owned::remove_dir_all(dir)?;
        }
        Ok(())
    }

    /// An image by id, without a visibility check: for a backend given an
    /// id the daemon already checked the tenant may use.
    pub fn by_id(&self, id: &Digest) -> Result<Image> {
        self.image(id)
    }

    /// Load an image by digest (no visibility check).
    fn image(&self, id: &Digest) -> Result<Image> {
        let dir = self.root.join("images").join(id.hex());
        let bytes = owned::read(dir.join("image.json"))
            .map_err(|_| Error::not_found(format!("image {id}")))?;
        let record: ImageRecord = serde_json::from_slice(&bytes)?;
        let rootfs = match (&record.base_dir, record.layers.is_empty()) {
            (Some(b), true) => b.clone(),
            _ => dir.join("rootfs"),
        };
        Ok(Image {
            record,
            rootfs,
            dir,
        })
    }

    fn read_ref(&self, owner: &Owner, name: &str, tag: &str) -> Option<Digest> {
        let p = self
            .root
            .join("refs")
            .join(owner.dir())
            .join(name)
            .join(tag);
        Digest::parse(owned::read_to_string(p).ok()?.trim()).ok()
    }

    /// Resolve a reference as `owner` sees it: its own names first, then
    /// public ones; a digest only when one of those names points at it.
    /// Another tenant's image is simply not found.
    pub fn resolve(&self, owner: &Owner, reference: &str) -> Result<Image> {
        let not_found = || {
            Error::new(
                ErrorCode::NotFound,
                format!("image {reference:?} not found"),
            )
            .with_field("image")
        };
        match Reference::parse(reference)? {
            Reference::Name { name, tag } => {
                let id = self
                    .read_ref(owner, &name, &tag)
                    .or_else(|| self.read_ref(&Owner::Public, &name, &tag))
                    .ok_or_else(not_found)?;
                self.image(&id).map_err(|_| not_found())
            }
            Reference::Digest(d) => {
                let visible = self.list(owner)?.iter().any(|n| n.id == d);
                if !visible {
                    return Err(not_found());
                }
                self.image(&d).map_err(|_| not_found())
            }
        }
    }

    fn names_of(&self, owner: &Owner) -> Result<Vec<ImageName>> {
        let base = self.root.join("refs").join(owner.dir());
        let mut out = Vec::new();
        let Ok(names) = owned::read_dir(&base) else {
            return Ok(out);
        };
        for n in names {
            let n = n?;
            for t in owned::read_dir(n.path())? {
                let t = t?;
                let (name, tag) = (
                    n.file_name().to_string_lossy().into_owned(),
                    t.file_name().to_string_lossy().into_owned(),
                );
                if let Some(id) = self.read_ref(owner, &name, &tag) {
                    out.push(ImageName {
                        name,
                        tag,
                        owner: owner.label().to_string(),
                        id,
                    });
                }
            }
        }
        out.sort_by(|a, b| (&a.name, &a.tag).cmp(&(&b.name, &b.tag)));
        Ok(out)
    }

    /// The names `owner` sees: its own, then the public ones.
    pub fn list(&self, owner: &Owner) -> Result<Vec<ImageName>> {
        let mut v = self.names_of(owner)?;
        if *owner != Owner::Public {
            v.extend(self.names_of(&Owner::Public)?);
        }
        Ok(v)
    }

    /// Remove `owner`'s name (tenants cannot remove public names). The
    /// content goes at the next GC once nothing uses it.
    pub fn delete(&self, owner: &Owner, reference: &str) -> Result<Digest> {
        let Reference::Name { name, tag } = Reference::parse(reference)? else {
            return Err(Error::invalid(
                "delete an image by name[:tag], not by digest",
            ));
        };
        let id = self.read_ref(owner, &name, &tag).ok_or_else(|| {
            Error::not_found(format!("image {reference:?} (among your own images)"))
        })?;
        let dir = self.root.join("refs").join(owner.dir()).join(&name);
        owned::remove_file(dir.join(&tag))?;
        let _ = owned::remove_dir(&dir);
        Ok(id)
    }

    pub fn cache_get(&self, key: &Digest) -> Option<CacheEntry> {
        let b = owned::read(self.root.join("cache").join(format!("{}.json", key.hex()))).ok()?;
        let e: CacheEntry = serde_json::from_slice(&b).ok()?;
        // A hit needs its layer still stored.
        match &e.layer {
            Some(l) if !owned::is_file(self.layer_path(&l.digest)) => None,
            _ => Some(e),
        }
    }

    pub fn cache_put(&self, key: &Digest, e: &CacheEntry) -> Result<()> {
        let dest = self.root.join("cache").join(format!("{}.json", key.hex()));
        self.write_atomic(&dest, &serde_json::to_vec(e)?)
    }

    /// Remove images no name points at and `in_use` (sandboxes, snapshots)
    /// does not list, then layers no remaining image needs, and cache
    /// entries whose layer went.
    pub fn gc(&self, in_use: &HashSet<Digest>) -> Result<GcReport> {
        let _lock = self.lock_exclusive()?;
        let mut keep: HashSet<Digest> = in_use.clone();
        let refs = self.root.join("refs");
        for owner in owned::read_dir(&refs)? {
            let owner = owner?.path();
            for name in owned::read_dir(&owner)? {
                for tag in owned::read_dir(name?.path())? {
                    if let Ok(s) = owned::read_to_string(tag?.path()) {
                        if let Ok(d) = Digest::parse(s.trim()) {
                            keep.insert(d);
                        }
                    }
                }
            }
        }
        let mut report = GcReport::default();
        let mut needed_layers: HashSet<Digest> = HashSet::new();
        for e in owned::read_dir(self.root.join("images"))? {
            let e = e?;
            let Ok(id) = Digest::parse(&format!("sha256:{}", e.file_name().to_string_lossy()))
            else {
                continue;
            };
            if keep.contains(&id) {
                if let Ok(img) = self.image(&id) {
                    needed_layers.extend(img.record.layers.into_iter().map(|l| l.digest));
                }
                continue;
            }
            // What goes from the disk: not the files another image's root
            // still links (see `layer::link_tree`).
            report.bytes_freed += own_disk_bytes(&e.path());
            owned::remove_dir_all(e.path())?;
            report.images_removed += 1;
        }
        for e in owned::read_dir(self.root.join("layers"))? {
            let e = e?;
            let Ok(d) = Digest::parse(&format!("sha256:{}", e.file_name().to_string_lossy()))
            else {
                continue;
            };
            if !needed_layers.contains(&d) {
                report.bytes_freed += e.metadata().map(|m| m.len()).unwrap_or(0);
                owned::remove_file(e.path())?;
                report.layers_removed += 1;
            }
        }
        for e in owned::read_dir(self.root.join("cache"))? {
            let e = e?;
            let stale = owned::read(e.path())
                .ok()
                .and_then(|b| serde_json::from_slice::<CacheEntry>(&b).ok())
                .is_none_or(|c| {
                    c.layer
                        .is_some_and(|l| !owned::is_file(self.layer_path(&l.digest)))
                });
            if stale {
                let _ = owned::remove_file(e.path());
            }
        }
        Ok(report)
    }
}

/// Disk space (allocated blocks) the tree at `p` holds on its own: every
/// file with all its hard links inside `p` counts once; a file also linked
/// from elsewhere (another image's root sharing it) does not. What removing
/// `p` frees.
pub fn own_disk_bytes(p: &Path) -> u64 {
    use std::collections::HashMap;
    fn walk(d: &Dir, seen: &mut HashMap<(u64, u64), (u64, u64)>, total: &mut u64) {
        for n in d.entries().unwrap_or_default() {
            let Ok(m) = d.lstat_at(&n) else { continue };
            let bytes = m.st_blocks as u64 * 512;
            // st_nlink is u64 on x86_64 but u32 on other targets.
            #[allow(clippy::unnecessary_cast)]
            let nlink = m.st_nlink as u64;
            if kind(&m) == libc::S_IFDIR {
                *total += bytes;
                if let Ok(sub) = d.sub(&n) {
                    walk(&sub, seen, total);
                }
            } else if nlink <= 1 {
                *total += bytes;
            } else {
                let e = seen.entry((m.st_dev, m.st_ino)).or_insert((nlink, 0));
                e.1 += 1;
                if e.1 == e.0 {
                    *total += bytes;
                }
            }
        }
    }
    // An image root is the tenant's tree: walked through descriptors.
    let Ok(d) = Dir::open(p, Resolve::NoSymlinks) else {
        return 0;
    };
    let mut seen = HashMap::new();
    let mut total = d.stat_self().map(|m| m.st_blocks as u64 * 512).unwrap_or(0);
    walk(&d, &mut seen, &mut total);
    total
}

/// Apparent bytes of the regular files under `p` (symlinks not followed).
pub fn tree_bytes(p: &Path) -> u64 {
    fn walk(d: &Dir) -> u64 {
        let mut sum = 0;
        for n in d.entries().unwrap_or_default() {
            let Ok(m) = d.lstat_at(&n) else { continue };
            match kind(&m) {
                libc::S_IFDIR => sum += d.sub(&n).map(|s| walk(&s)).unwrap_or(0),
                libc::S_IFREG => sum += m.st_size as u64,
                _ => {}
            }
        }
        sum
    }
    Dir::open(p, Resolve::NoSymlinks)
        .map(|d| walk(&d))
        .unwrap_or(0)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // fixtures on the tests' own temp dirs
#[path = "store_tests.rs"]
mod tests;
