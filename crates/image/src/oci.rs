//! Importing an image archive: an OCI image layout tar (`oci-layout`,
//! `index.json`, `blobs/sha256/...`) or a `docker save` tar
//! (`manifest.json`, a config JSON, layer tars). Every blob is verified by
//! its digest (OCI) or diff_id (docker save) before it is stored; layers
//! are applied in order (with whiteouts) when the image is committed; the
//! config's Env/WorkingDir/User/Entrypoint/Cmd are kept.

use crate::owned;
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use stasis_core::{Error, ErrorCode, Result};

use crate::digest::Digest;
use crate::layer::{self, ApplyOptions};
use crate::store::{Image, ImageConfig, ImageStore, LayerRef, Owner, Reference};

const INDEX_MEDIA: &str = "application/vnd.oci.image.index.v1+json";
const DOCKER_LIST_MEDIA: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

/// What an archive held, its layers already in the store.
#[derive(Debug, Clone)]
pub struct Imported {
    pub config: ImageConfig,
    pub layers: Vec<LayerRef>,
    /// A name the archive suggests (`RepoTags` or the OCI ref annotation).
    pub suggested: Option<String>,
}

#[derive(Deserialize)]
struct Descriptor {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    digest: String,
    #[serde(default)]
    platform: Option<Platform>,
    #[serde(default)]
    annotations: HashMap<String, String>,
}

#[derive(Deserialize)]
struct Platform {
    #[serde(default)]
    architecture: String,
    #[serde(default)]
    os: String,
}

#[derive(Deserialize)]
struct Index {
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct Manifest {
    config: Descriptor,
    layers: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct DockerEntry {
    #[serde(rename = "Config")]
    config: String,
    #[serde(rename = "RepoTags", default)]
    repo_tags: Option<Vec<String>>,
    #[serde(rename = "Layers")]
    layers: Vec<String>,
}

#[derive(Deserialize, Default)]
struct ConfigFile {
    #[serde(default)]
    config: Option<RuntimeConfig>,
    #[serde(default)]
    rootfs: Option<RootFs>,
}

#[derive(Deserialize, Default)]
struct RootFs {
    #[serde(default)]
    diff_ids: Vec<String>,
}

#[derive(Deserialize, Default)]
struct RuntimeConfig {
    #[serde(rename = "Env", default)]
    env: Option<Vec<String>>,
    #[serde(rename = "WorkingDir", default)]
    working_dir: Option<String>,
    #[serde(rename = "User", default)]
    user: Option<String>,
    #[serde(rename = "Entrypoint", default)]
    entrypoint: Option<Vec<String>>,
    #[serde(rename = "Cmd", default)]
    cmd: Option<Vec<String>>,
}

fn bad(why: impl std::fmt::Display) -> Error {
    Error::invalid(format!("image archive: {why}"))
}

/// The archive's files, extracted to a temp dir (regular files only;
/// symlinks kept as names to follow within the archive).
struct Unpacked {
    files: HashMap<String, PathBuf>,
    links: HashMap<String, String>,
}

impl Unpacked {
    /// The archive's tar stream (decompressed) may be at most `limit`
    /// bytes, as a layer's is: past it the import is 413 `payload_too_large`.
    fn read(dir: &Path, archive: &Path, limit: u64) -> Result<Unpacked> {
        let f = owned::open(archive)
            .map_err(|e| Error::from(e).context(format!("open {}", archive.display())))?;
        let mut ar = tar::Archive::new(layer::Limited::new(layer::decompress(f)?, limit));
        let mut u = Unpacked {
            files: HashMap::new(),
            links: HashMap::new(),
        };
        let over = || {
            Error::new(
                ErrorCode::PayloadTooLarge,
                format!(
                    "image archive refused: it unpacks to more than the limit of {limit} bytes"
                ),
            )
        };
        for (i, e) in ar.entries().map_err(bad)?.enumerate() {
            let mut e = match e {
                Ok(e) => e,
                Err(e) if layer::is_limit(&e) => return Err(over()),
                Err(e) => return Err(bad(format!("not a tar: {e}"))),
            };
            let name = String::from_utf8_lossy(&e.path_bytes()).into_owned();
            let rel = layer::normalize(&name)?;
            let key = rel.to_string_lossy().into_owned();
            match e.header().entry_type() {
                tar::EntryType::Regular | tar::EntryType::Continuous => {
                    let p = dir.join(format!("f{i}"));
                    let mut out = owned::create(&p)?;
                    match std::io::copy(&mut e, &mut out) {
                        Ok(_) => {}
                        Err(e) if layer::is_limit(&e) => return Err(over()),
                        Err(e) => return Err(e.into()),
                    }
                    u.files.insert(key, p);
                }
                tar::EntryType::Symlink => {
                    let target = e
                        .link_name_bytes()
                        .map(|b| String::from_utf8_lossy(&b).into_owned())
                        .unwrap_or_default();
                    let resolved = resolve_link(rel.parent().unwrap_or(Path::new("")), &target)
                        .ok_or_else(|| bad(format!("{name:?} links outside the archive")))?;
                    u.links.insert(key, resolved);
                }
                tar::EntryType::Directory => {}
                other => return Err(bad(format!("{name:?}: unexpected entry type {other:?}"))),
            }
        }
        Ok(u)
    }

    fn path(&self, name: &str) -> Result<&Path> {
        let mut key = layer::normalize(name)?.to_string_lossy().into_owned();
        for _ in 0..8 {
            if let Some(p) = self.files.get(&key) {
                return Ok(p);
            }
            match self.links.get(&key) {
                Some(t) => key = t.clone(),
                None => break,
            }
        }
        Err(bad(format!("{name:?} is missing")))
    }

    fn json<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<T> {
        let b = owned::read(self.path(name)?)?;
        serde_json::from_slice(&b).map_err(|e| bad(format!("{name}: {e}")))
    }

    /// A blob by digest, verified.
    fn blob(&self, digest: &str) -> Result<&Path> {
        let d =
            Digest::parse(digest).map_err(|_| bad(format!("{digest:?} is not a sha256 digest")))?;
        let p = self.path(&format!("blobs/sha256/{}", d.hex()))?;
        verify(p, &d, digest)?;
        Ok(p)
    }
}

/// `target` seen from directory `dir`, lexically, staying inside the archive.
fn resolve_link(dir: &Path, target: &str) -> Option<String> {
    if target.starts_with('/') {
        return None;
    }
    let mut parts: Vec<String> = dir
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    for c in target.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p.to_string()),
        }
    }
    Some(parts.join("/"))
}

fn verify(p: &Path, want: &Digest, what: &str) -> Result<()> {
    let got = Digest::of_file(p)?;
    if &got != want {
        return Err(Error::new(
            ErrorCode::IntegrityError,
            format!("image archive: {what} does not match its digest (content is {got})"),
        ));
    }
    Ok(())
}

fn runtime(cfg: ConfigFile) -> ImageConfig {
    let c = cfg.config.unwrap_or_default();
    ImageConfig {
        env: c.env.unwrap_or_default(),
        working_dir: c.working_dir.unwrap_or_default(),
        user: c.user.unwrap_or_default(),
        entrypoint: c.entrypoint,
        cmd: c.cmd,
    }
}

/// Read an archive (unpacking at most `max_bytes` of it), verify its blobs
/// and put its layers into the store.
pub fn read_archive(store: &ImageStore, archive: &Path, max_bytes: u64) -> Result<Imported> {
    let tmp = store.temp_dir("import")?;
    let r = read_in(store, archive, &tmp, max_bytes);
    let _ = owned::remove_dir_all(&tmp);
    r
}

fn read_in(store: &ImageStore, archive: &Path, tmp: &Path, max_bytes: u64) -> Result<Imported> {
    let u = Unpacked::read(tmp, archive, max_bytes)?;
    let (config, layer_paths, suggested) = if u.files.contains_key("index.json") {
        oci_layout(&u)?
    } else if u.files.contains_key("manifest.json") {
        docker_save(&u)?
    } else {
        return Err(bad(
            "neither an OCI image layout (index.json) nor a docker save archive (manifest.json)",
        ));
    };
    let mut layers = Vec::new();
    for p in layer_paths {
        // The layer file is moved into the store (stored once by digest).
        let staged = tmp.join(format!("layer-{}", layers.len()));
        owned::rename(&p, &staged)?;
        layers.push(store.put_layer(&staged)?);
    }
    Ok(Imported {
        config,
        layers,
        suggested,
    })
}

fn oci_layout(u: &Unpacked) -> Result<(ImageConfig, Vec<PathBuf>, Option<String>)> {
    let mut index: Index = u.json("index.json")?;
    let mut suggested = None;
    for _ in 0..4 {
        let pick = pick(&index.manifests)
            .ok_or_else(|| bad("index.json lists no linux/amd64 manifest"))?;
        if let Some(n) = pick.annotations.get("org.opencontainers.image.ref.name") {
            suggested.get_or_insert_with(|| n.clone());
        }
        let blob = u.blob(&pick.digest)?;
        let bytes = owned::read(blob)?;
        if pick.media_type == INDEX_MEDIA || pick.media_type == DOCKER_LIST_MEDIA {
            index =
                serde_json::from_slice(&bytes).map_err(|e| bad(format!("nested index: {e}")))?;
            continue;
        }
        let m: Manifest =
            serde_json::from_slice(&bytes).map_err(|e| bad(format!("manifest: {e}")))?;
        let cfg: ConfigFile = serde_json::from_slice(&owned::read(u.blob(&m.config.digest)?)?)
            .map_err(|e| bad(format!("config: {e}")))?;
        let layers = m
            .layers
            .iter()
            .map(|l| u.blob(&l.digest).map(Path::to_path_buf))
            .collect::<Result<Vec<_>>>()?;
        return Ok((runtime(cfg), layers, suggested));
    }
    Err(bad("indexes nested too deeply"))
}

fn pick(ms: &[Descriptor]) -> Option<&Descriptor> {
    ms.iter()
        .find(|m| {
            m.platform
                .as_ref()
                .is_none_or(|p| p.architecture == "amd64" && p.os == "linux")
        })
        .or(ms.first().filter(|_| ms.len() == 1))
}

fn docker_save(u: &Unpacked) -> Result<(ImageConfig, Vec<PathBuf>, Option<String>)> {
    let entries: Vec<DockerEntry> = u.json("manifest.json")?;
    let [e] = entries.as_slice() else {
        return Err(bad(format!(
            "manifest.json holds {} images; import one image per archive",
            entries.len()
        )));
    };
    let cfg_path = u.path(&e.config)?;
    // The config is named by its own digest (`<hex>.json` or `blobs/sha256/<hex>`).
    let stem = Path::new(&e.config)
        .file_name()
        .map(|s| s.to_string_lossy().trim_end_matches(".json").to_string())
        .unwrap_or_default();
    if let Ok(d) = Digest::parse(&format!("sha256:{stem}")) {
        verify(cfg_path, &d, &e.config)?;
    }
    let cfg: ConfigFile =
        serde_json::from_slice(&owned::read(cfg_path)?).map_err(|e| bad(format!("config: {e}")))?;
    let diff_ids = cfg
        .rootfs
        .as_ref()
        .map(|r| r.diff_ids.clone())
        .unwrap_or_default();
    if diff_ids.len() != e.layers.len() {
        return Err(bad(format!(
            "config lists {} diff_ids for {} layers",
            diff_ids.len(),
            e.layers.len()
        )));
    }
    let mut layers = Vec::new();
    for (l, want) in e.layers.iter().zip(&diff_ids) {
        let p = u.path(l)?;
        let want = Digest::parse(want).map_err(|_| bad(format!("diff_id {want:?}")))?;
        let got = layer::diff_id(p)?;
        if got != want {
            return Err(Error::new(
                ErrorCode::IntegrityError,
                format!("image archive: layer {l:?} does not match its diff_id {want} (content is {got})"),
            ));
        }
        layers.push(p.to_path_buf());
    }
    let suggested = e.repo_tags.as_ref().and_then(|t| t.first().cloned());
    Ok((runtime(cfg), layers, suggested))
}

/// A store name from a suggestion like `docker.io/library/python:3.11`.
pub fn name_from_suggestion(s: &str) -> Option<String> {
    let last = s.rsplit('/').next()?;
    Reference::parse(last).ok().map(|r| r.to_string())
}

/// Import an archive and name it `name` (or what the archive suggests). The
/// archive itself unpacks to at most `opts.max_bytes`, as each layer does.
pub fn import(
    store: &ImageStore,
    owner: &Owner,
    archive: &Path,
    name: Option<&str>,
    opts: &ApplyOptions,
) -> Result<Image> {
    let _lock = store.lock_shared()?;
    let imported = read_archive(store, archive, opts.max_bytes)?;
    let reference = match name {
        Some(n) => n.to_string(),
        None => imported
            .suggested
            .as_deref()
            .and_then(name_from_suggestion)
            .ok_or_else(|| bad("the archive names no image; give a name (-t NAME)"))?,
    };
    let Reference::Name { name, tag } = Reference::parse(&reference)? else {
        return Err(bad("name the image name[:tag], not by digest"));
    };
    store.commit(
        owner,
        &name,
        &tag,
        None,
        imported.layers,
        imported.config,
        vec![provenance(store, archive)],
        opts,
    )
}

/// The history line of an import. It never names a daemon path: an upload
/// (spooled into the store) is "an uploaded archive", a file the operator
/// named is its file name only.
fn provenance(store: &ImageStore, archive: &Path) -> String {
    match archive.file_name() {
        Some(n) if !archive.starts_with(store.root()) => {
            format!("imported from {}", n.to_string_lossy())
        }
        _ => "imported from an uploaded archive".to_string(),
    }
}

/// Read at most `limit` bytes of a reader into a file (for uploads).
pub fn save_upload(mut r: impl Read, dest: &Path, limit: u64) -> Result<u64> {
    let mut f = owned::create(dest)?;
    let n = std::io::copy(&mut (&mut r).take(limit + 1), &mut f)?;
    if n > limit {
        let _ = owned::remove_file(dest);
        return Err(Error::new(
            ErrorCode::PayloadTooLarge,
            format!("upload is larger than the limit of {limit} bytes"),
        ));
    }
    Ok(n)
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // fixtures on the tests' own temp dirs
#[path = "oci_tests.rs"]
pub(crate) mod tests;
