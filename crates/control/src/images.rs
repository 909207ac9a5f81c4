//! The daemon's images: a tenant's (and the public) images in the image
//! store under `<data>/images-store`, imported from OCI / docker archives or
//! registered by the operator from a host directory; and the pinning of a
//! manifest's `image` (`name[:tag]` or `sha256:`) to an image id at create,
//! so a sandbox keeps the exact image it started from and another tenant's
//! image is never found.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use stasis_core::{Error, ErrorCode, Result, TenantId};
use stasis_image::build::{BuildEvent, BuildRequest, StepRunner};
use stasis_image::layer::ApplyOptions;
use stasis_image::store::{ImageConfig, ImageName, ImageRecord, ImageStore, Owner, Reference};
use utoipa::ToSchema;

/// An image as the API shows it: its record (`image.json`) and the names
/// the caller sees pointing at it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ImageInfo {
    pub id: String,
    pub names: Vec<String>,
    #[schema(value_type = Object)]
    pub record: ImageRecord,
}

/// One name in a listing.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ImageEntry {
    pub name: String,
    pub tag: String,
    /// `public` or the owning tenant.
    pub owner: String,
    pub id: String,
}

impl From<ImageName> for ImageEntry {
    fn from(n: ImageName) -> Self {
        ImageEntry {
            name: n.name,
            tag: n.tag,
            owner: n.owner,
            id: n.id.to_string(),
        }
    }
}

/// The stasis base image: the Debian bookworm root filesystem with Python
/// that setup builds for the microVM guest, as a directory
/// (`<images>/default/base-rootfs`), registered public at every daemon start.
pub const BASE_IMAGE: &str = "stasis-base:bookworm";

/// Where the guest image build leaves that directory, under the images dir.
pub const BASE_ROOTFS: &str = "default/base-rootfs";

/// The code interpreter (`images/code-interpreter/`: a Jupyter kernel and
/// the server the E2B code-interpreter SDKs call), built FROM the base by
/// `scripts/build-code-interpreter.sh` and registered public at every
/// daemon start when it is there.
pub const CODE_INTERPRETER_IMAGE: &str = "stasis-code-interpreter:latest";

/// Where that build leaves it, under the images dir: `rootfs/` (the root
/// directory) and `config.json` (its ENV, WORKDIR, ENTRYPOINT and CMD).
pub const CODE_INTERPRETER_DIR: &str = "code-interpreter";

pub struct Images {
    store: Arc<ImageStore>,
    /// The microVM guest image whose kernel and initrd serve every image.
    default_guest: Option<PathBuf>,
    /// Limits for what tenants send: layers, archives and contexts
    /// unpacked (setuid/setgid refused).
    tenant_opts: ApplyOptions,
    /// Largest upload (an import archive, a build context) in bytes.
    upload_limit: u64,
}

/// The daemon's image limits (`stasis serve` flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImageLimits {
    /// Largest upload, an import archive or a build context, as sent
    /// (`--max-upload-mb`): a bigger one is 413 and leaves nothing.
    pub upload_bytes: u64,
    /// Most bytes one tar may unpack to (`--max-layer-mb`): each layer of
    /// an import, the import archive itself, a build context, a layer a
    /// build step makes, an archive a Dockerfile `ADD`s. Past it: 413.
    pub layer_bytes: u64,
}

/// The default of [`ImageLimits::upload_bytes`]: 4 GiB.
pub const DEFAULT_UPLOAD_LIMIT: u64 = 4 << 30;

impl Default for ImageLimits {
    fn default() -> Self {
        ImageLimits {
            upload_bytes: DEFAULT_UPLOAD_LIMIT,
            layer_bytes: stasis_image::layer::DEFAULT_MAX_LAYER_BYTES,
        }
    }
}

fn owner(t: &TenantId) -> Owner {
    Owner::Tenant(t.as_str().to_string())
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::internal(format!("image task: {e}")))?
}

impl Images {
    pub fn open(root: &Path) -> Result<Arc<Images>> {
        Images::open_with_guest(root, None, ImageLimits::default())
    }

    /// With the default microVM guest image (`<images>/default`), so images
    /// also run on the microVM backend, and the daemon's limits.
    pub fn open_with_guest(
        root: &Path,
        default_guest: Option<PathBuf>,
        limits: ImageLimits,
    ) -> Result<Arc<Images>> {
        if limits.upload_bytes == 0 || limits.layer_bytes == 0 {
            return Err(Error::invalid(
                "image limits must be positive (--max-upload-mb, --max-layer-mb)",
            ));
        }
        let store = ImageStore::open(root)?;
        // Nothing builds yet: what is in tmp/ was left by a crash.
        store.clean_stale()?;
        Ok(Arc::new(Images {
            store: Arc::new(store),
            default_guest,
            tenant_opts: ApplyOptions {
                max_bytes: limits.layer_bytes,
                ..ApplyOptions::default()
            },
            upload_limit: limits.upload_bytes,
        }))
    }

    /// Largest upload (an import archive, a build context) in bytes; a
    /// bigger one is 413 `payload_too_large` and leaves nothing behind.
    pub fn upload_limit(&self) -> u64 {
        self.upload_limit
    }

    pub fn root(&self) -> &Path {
        self.store.root()
    }

    pub fn store(&self) -> &Arc<ImageStore> {
        &self.store
    }

    /// A path under the store's tmp dir for an upload.
    pub fn upload_path(&self, what: &str) -> Result<PathBuf> {
        Ok(self.store.temp_dir(what)?.join("upload"))
    }

    /// Make sure the image `id` has its microVM guest image (built once).
    pub async fn ensure_guest(&self, id: &str) -> Result<()> {
        let Some(default_guest) = self.default_guest.clone() else {
            return Err(Error::unsupported(
                "this daemon has no default microVM guest image to run images with",
            ));
        };
        let id = stasis_image::Digest::parse(id)?;
        let s = self.store.clone();
        blocking(move || {
            let img = s.by_id(&id)?;
            stasis_image::guest::ensure_guest(&img, &default_guest).map(|_| ())
        })
        .await
    }

    pub async fn list(&self, tenant: &TenantId) -> Result<Vec<ImageEntry>> {
        let (s, o) = (self.store.clone(), owner(tenant));
        let v = blocking(move || s.list(&o)).await?;
        // Build steps' temporary names are not the tenant's images.
        Ok(v.into_iter()
            .filter(|n| !n.name.starts_with("_build-"))
            .map(ImageEntry::from)
            .collect())
    }

    pub async fn inspect(&self, tenant: &TenantId, reference: &str) -> Result<ImageInfo> {
        let (s, o, r) = (self.store.clone(), owner(tenant), reference.to_string());
        blocking(move || {
            let img = s.resolve(&o, &r)?;
            let names = s
                .list(&o)?
                .into_iter()
                .filter(|n| n.id == img.record.id)
                .map(|n| format!("{}:{}", n.name, n.tag))
                .collect();
            Ok(ImageInfo {
                id: img.record.id.to_string(),
                names,
                record: img.record,
            })
        })
        .await
    }

    /// Remove the tenant's name; the content goes at the next GC.
    pub async fn delete(&self, tenant: &TenantId, reference: &str) -> Result<String> {
        let (s, o, r) = (self.store.clone(), owner(tenant), reference.to_string());
        Ok(blocking(move || s.delete(&o, &r)).await?.to_string())
    }

    /// Import an archive (OCI layout or docker save) as the tenant's image.
    pub async fn import(
        &self,
        tenant: &TenantId,
        archive: PathBuf,
        name: Option<String>,
    ) -> Result<ImageInfo> {
        let (s, o, opts) = (self.store.clone(), owner(tenant), self.tenant_opts);
        let img =
            blocking(move || stasis_image::oci::import(&s, &o, &archive, name.as_deref(), &opts))
                .await?;
        self.inspect(tenant, img.record.id.as_str()).await
    }

    /// The operator registers a host directory as a public image, used in
    /// place (read-only). The host's `/` is refused: a sandbox without an
    /// image already gets it, masked.
    pub async fn register(&self, reference: &str, dir: &Path) -> Result<ImageEntry> {
        self.register_with(reference, dir, ImageConfig::default())
            .await
    }

    /// An image the operator built into a directory (`dir/rootfs/` and
    /// `dir/config.json`, as `scripts/build-code-interpreter.sh` leaves
    /// it), registered public with its config, so a sandbox of it gets the
    /// image's ENV, WORKDIR and default command. `None` when `dir` holds
    /// no `rootfs/` (not built here).
    pub async fn register_built(&self, reference: &str, dir: &Path) -> Result<Option<ImageEntry>> {
        let root = dir.join("rootfs");
        if !root.is_dir() {
            return Ok(None);
        }
        let cfg_path = dir.join("config.json");
        let config: ImageConfig = std::fs::read(&cfg_path)
            .map_err(Error::from)
            .and_then(|b| serde_json::from_slice(&b).map_err(Error::from))
            .map_err(|e| {
                Error::invalid(format!("{}: {}", cfg_path.display(), e.message)).with_field("dir")
            })?;
        self.register_with(reference, &root, config).await.map(Some)
    }

    async fn register_with(
        &self,
        reference: &str,
        dir: &Path,
        config: ImageConfig,
    ) -> Result<ImageEntry> {
        let Reference::Name { name, tag } = Reference::parse(reference)? else {
            return Err(Error::invalid("register an image under name[:tag]").with_field("name"));
        };
        let canon = dir
            .canonicalize()
            .map_err(|e| Error::invalid(format!("{}: {e}", dir.display())).with_field("dir"))?;
        if !canon.is_dir() || canon.parent().is_none() {
            return Err(Error::invalid(format!(
                "{} must be a directory other than /",
                canon.display()
            ))
            .with_field("dir"));
        }
        let s = self.store.clone();
        let img = blocking(move || {
            s.commit(
                &Owner::Public,
                &name,
                &tag,
                Some(&canon),
                vec![],
                config,
                vec![format!("registered from {}", canon.display())],
                &ApplyOptions::default(),
            )
            .map(|img| (img, name, tag))
        })
        .await?;
        Ok(ImageEntry {
            name: img.1,
            tag: img.2,
            owner: "public".into(),
            id: img.0.record.id.to_string(),
        })
    }

    /// The image a manifest's `image` means for this tenant: `Some((id,
    /// config))` for an image in the store; `None` for a bare name the store
    /// does not hold (an operator directory under the images dir, looked up
    /// by the backend as before). A tag or digest the tenant cannot see is
    /// not found.
    pub async fn pin(
        &self,
        tenant: &TenantId,
        image: &str,
    ) -> Result<Option<(String, stasis_image::store::ImageConfig)>> {
        let (s, o, r) = (self.store.clone(), owner(tenant), image.to_string());
        match blocking(move || s.resolve(&o, &r)).await {
            Ok(img) => Ok(Some((img.record.id.to_string(), img.record.config))),
            Err(e) if e.code == ErrorCode::NotFound && !image.contains(':') => Ok(None),
            Err(e) if e.code == ErrorCode::NotFound => Err(Error::new(
                ErrorCode::InvalidManifest,
                format!("image: {image:?} not found"),
            )
            .with_field("image")),
            Err(e) => Err(e),
        }
    }
}

impl Images {
    /// Garbage-collect the store: images no name points at and no live
    /// sandbox or stored snapshot (of any tenant) was created from, then
    /// the layers no remaining image needs.
    pub async fn gc(&self, manager: &crate::Manager) -> Result<stasis_image::store::GcReport> {
        let mut in_use = std::collections::HashSet::new();
        let mut note = |m: &stasis_core::Manifest| {
            if let Some(d) = m
                .image
                .as_deref()
                .and_then(|i| stasis_image::Digest::parse(i).ok())
            {
                in_use.insert(d);
            }
        };
        for rec in manager.meta().list_live().await? {
            note(&rec.manifest);
        }
        for t in manager.meta().list_tenants().await? {
            for s in manager.snapshots().list(&t.id).await? {
                note(&s.manifest);
            }
        }
        let s = self.store.clone();
        blocking(move || s.gc(&in_use)).await
    }
}

/// The Dockerfile's name inside an uploaded build context.
pub const CONTEXT_DOCKERFILE: &str = ".stasis-dockerfile";

impl Images {
    /// Build `reference` for the tenant from an uploaded context tar (with
    /// the Dockerfile at [`CONTEXT_DOCKERFILE`], else `Dockerfile`), sending
    /// progress to `tx`. The context is unpacked with the rules of a plain
    /// archive (no escapes, devices, setuid files or `.wh.` names; at most
    /// the layer limit), and so is an archive its Dockerfile `ADD`s.
    pub async fn build(
        &self,
        tenant: &TenantId,
        context_tar: PathBuf,
        reference: String,
        build_args: std::collections::HashMap<String, String>,
        runner: Arc<dyn StepRunner>,
        tx: tokio::sync::mpsc::Sender<BuildEvent>,
    ) -> Result<ImageInfo> {
        let (s, o, opts) = (self.store.clone(), owner(tenant), self.tenant_opts);
        let id = blocking(move || {
            let dir = s.temp_dir("context")?;
            let r = (|| {
                stasis_image::layer::apply_file(&context_tar, &dir, &opts.plain())
                    .map_err(|e| e.context("build context"))?;
                let df = stasis_image::context::take_dockerfile(
                    &dir,
                    &[CONTEXT_DOCKERFILE, "Dockerfile"],
                    CONTEXT_DOCKERFILE,
                )?
                .ok_or_else(|| {
                    Error::invalid("the build context holds no Dockerfile").with_field("dockerfile")
                })?;
                let req = BuildRequest {
                    owner: o,
                    reference: &reference,
                    dockerfile: &df,
                    context: &dir,
                    build_args,
                    opts,
                };
                stasis_image::build::build(&s, &req, runner.as_ref(), &mut |ev| {
                    let _ = tx.blocking_send(ev);
                })
            })();
            let _ = std::fs::remove_dir_all(&dir);
            Ok(r?.image.record.id)
        })
        .await?;
        self.inspect(tenant, id.as_str()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(s: &str) -> TenantId {
        TenantId::parse(s).unwrap()
    }

    #[tokio::test]
    async fn register_pin_and_tenancy() {
        let tmp = tempfile::tempdir().unwrap();
        let images = Images::open(&tmp.path().join("store")).unwrap();
        let host = tmp.path().join("rootdir");
        std::fs::create_dir_all(host.join("bin")).unwrap();
        let e = images.register("base:1", &host).await.unwrap();
        assert_eq!(e.owner, "public");
        let a = tenant("t-a");
        let pinned = images.pin(&a, "base:1").await.unwrap().unwrap();
        assert_eq!(pinned.0, e.id);
        assert_eq!(images.pin(&a, &e.id).await.unwrap().unwrap().0, e.id);
        // A bare unknown name is left to the operator's images directory.
        assert!(images.pin(&a, "default").await.unwrap().is_none());
        let err = images.pin(&a, "nosuch:1").await.unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidManifest);
        assert_eq!(images.list(&a).await.unwrap().len(), 1);
        // Tenants cannot delete the public image.
        assert_eq!(
            images.delete(&a, "base:1").await.unwrap_err().code,
            ErrorCode::NotFound
        );
        let err = images.register("x", Path::new("/")).await.unwrap_err();
        assert_eq!(err.field.as_deref(), Some("dir"));
        let err = images
            .register("x", &tmp.path().join("missing"))
            .await
            .unwrap_err();
        assert_eq!(err.field.as_deref(), Some("dir"));
    }

    #[tokio::test]
    async fn a_built_image_directory_registers_with_its_config() {
        let tmp = tempfile::tempdir().unwrap();
        let images = Images::open(&tmp.path().join("store")).unwrap();
        let dir = tmp.path().join("built");
        std::fs::create_dir_all(&dir).unwrap();
        // Not built: nothing to register, no error.
        assert!(images.register_built("ci:1", &dir).await.unwrap().is_none());
        std::fs::create_dir_all(dir.join("rootfs/bin")).unwrap();
        // A root without its config is refused, not registered bare.
        let err = images.register_built("ci:1", &dir).await.unwrap_err();
        assert_eq!(err.field.as_deref(), Some("dir"));
        std::fs::write(dir.join("config.json"), "{not json").unwrap();
        assert!(images.register_built("ci:1", &dir).await.is_err());
        std::fs::write(
            dir.join("config.json"),
            r#"{"env": ["A=1"], "working_dir": "/home/user", "cmd": ["python3", "/s.py"]}"#,
        )
        .unwrap();
        let e = images.register_built("ci:1", &dir).await.unwrap().unwrap();
        assert_eq!(e.owner, "public");
        let (id, config) = images.pin(&tenant("t-a"), "ci:1").await.unwrap().unwrap();
        assert_eq!(id, e.id);
        assert_eq!(config.working_dir, "/home/user");
        assert_eq!(config.default_command(), vec!["python3", "/s.py"]);
        assert_eq!(config.get_env("A").as_deref(), Some("1"));
    }
}
