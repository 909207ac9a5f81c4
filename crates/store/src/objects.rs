//! Where objects live: the object store a URL names (local directory or
//! S3), and the object paths of the layout described in the crate docs.

use crate::ChunkAddr;
use object_store::path::Path as OPath;
use object_store::ObjectStore;
use stasis_core::{Error, Result, SnapshotId, TenantId};
use std::path::PathBuf;
use std::sync::Arc;

pub(crate) fn os_err(e: object_store::Error) -> Error {
    match e {
        object_store::Error::NotFound { path, .. } => Error::not_found(path),
        other => Error::internal(format!("object store: {other}")),
    }
}

pub(crate) fn is_loopback_url(u: &str) -> bool {
    let rest = u
        .strip_prefix("http://")
        .unwrap_or_else(|| u.strip_prefix("https://").unwrap_or(u));
    let host = rest.split('/').next().unwrap_or("");
    let host = host.rsplit_once(':').map(|(h, _)| h).unwrap_or(host);
    host == "localhost" || host.starts_with("127.") || host == "[::1]"
}

/// Build the object store for `file:///abs/path`, a bare absolute path, or `s3://bucket/prefix`.
pub fn object_store_from_url(url: &str) -> Result<Arc<dyn ObjectStore>> {
    if let Some(rest) = url.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(Error::invalid(format!("store url {url:?}: no bucket")));
        }
        let mut b = object_store::aws::AmazonS3Builder::from_env().with_bucket_name(bucket);
        let endpoint = std::env::var("AWS_ENDPOINT_URL")
            .or_else(|_| std::env::var("AWS_ENDPOINT"))
            .unwrap_or_default();
        if endpoint.starts_with("http://") && is_loopback_url(&endpoint) {
            b = b.with_allow_http(true);
        }
        if std::env::var("AWS_REGION").is_err() && std::env::var("AWS_DEFAULT_REGION").is_err() {
            b = b.with_region("us-east-1");
        }
        let s3 = b
            .build()
            .map_err(|e| Error::invalid(format!("store url {url:?}: {e}")))?;
        let prefix = prefix.trim_matches('/');
        if prefix.is_empty() {
            Ok(Arc::new(s3))
        } else {
            Ok(Arc::new(object_store::prefix::PrefixStore::new(s3, prefix)))
        }
    } else {
        let p = url.strip_prefix("file://").unwrap_or(url);
        if !p.starts_with('/') {
            return Err(Error::invalid(format!(
                "store url {url:?}: expected file:///absolute/path, /absolute/path or s3://bucket/prefix"
            )));
        }
        std::fs::create_dir_all(p).map_err(|e| Error::internal(format!("store dir {p}: {e}")))?;
        let fs = object_store::local::LocalFileSystem::new_with_prefix(p)
            .map_err(|e| Error::invalid(format!("store dir {p}: {e}")))?;
        Ok(Arc::new(fs))
    }
}

pub(crate) fn local_root_of(url: &str) -> Option<PathBuf> {
    if url.starts_with("s3://") {
        return None;
    }
    let p = url.strip_prefix("file://").unwrap_or(url);
    p.starts_with('/').then(|| PathBuf::from(p))
}

pub(crate) fn tenant_prefix(t: &TenantId) -> String {
    format!("tenants/{}", t.as_str())
}
pub(crate) fn record_path(t: &TenantId, id: &SnapshotId) -> OPath {
    OPath::from(format!("tenants/{}/snapshots/{}", t.as_str(), id.as_str()))
}
pub(crate) fn chunk_path(t: &TenantId, a: &ChunkAddr) -> OPath {
    let h = a.to_hex();
    OPath::from(format!("tenants/{}/chunks/{}/{}", t.as_str(), &h[..2], h))
}
pub(crate) fn chunks_prefix(t: &TenantId) -> OPath {
    OPath::from(format!("tenants/{}/chunks", t.as_str()))
}
pub(crate) fn locks_prefix(t: &TenantId) -> OPath {
    OPath::from(format!("tenants/{}/locks", t.as_str()))
}
