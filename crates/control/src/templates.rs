//! Templates: a tenant's named, versioned snapshots (memory and disk) that
//! new sandboxes start from instead of a cold boot plus setup.
//!
//! This module holds what is pure about them: the rules of a name and of a
//! reference (`name` or `name:version`), the API's view of a version, and
//! the secret scan that runs on a template's artifacts before it is
//! published. The manager (`manager::templates`) takes the snapshot, runs
//! the scan and keeps the catalog in `meta`.
//!
//! ## The secret scan
//! A tenant's secrets are injected into one exec or session at a time and
//! must never be baked into something that outlives it. Before a template is
//! stored, every artifact the backend wrote (the memory image and the disk
//! or filesystem layer, exactly the bytes a restore materializes) is read
//! once, in fixed-size blocks with an overlap of the longest secret minus one
//! byte (so a value split across two blocks is still seen), and searched for
//! every secret value of the tenant. Memory stays bounded whatever the size
//! of the artifact. The scan looks for the raw bytes of each value: a value
//! a program stored transformed (encoded, compressed, encrypted) is not
//! recognised.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use stasis_core::{Error, Result};
use stasis_meta::TemplateRecord;

/// Longest template name.
pub const MAX_NAME_LEN: usize = 64;

/// A template name: 1-64 characters of `[a-z0-9._-]`, starting with a
/// letter or digit (`field`: the request field named by the error).
pub fn validate_name(name: &str, field: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'_' || b == b'-'
        });
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{field}: template name {name:?} must be 1-{MAX_NAME_LEN} characters of [a-z0-9._-] \
             starting with a letter or digit"
        ))
        .with_field(field))
    }
}

/// A reference to a template: its name and a version (`None`: the latest).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateRef {
    pub name: String,
    pub version: Option<i64>,
}

impl TemplateRef {
    /// Parse `name` or `name:version` (version a positive integer).
    pub fn parse(s: &str, field: &str) -> Result<TemplateRef> {
        let (name, version) = match s.split_once(':') {
            None => (s, None),
            Some((n, v)) => {
                let parsed = v
                    .parse::<i64>()
                    .ok()
                    .filter(|p| *p >= 1 && p.to_string() == v);
                match parsed {
                    Some(p) => (n, Some(p)),
                    _ => {
                        return Err(Error::invalid(format!(
                            "{field}: template version {v:?} must be a positive integer \
                             (name or name:version)"
                        ))
                        .with_field(field))
                    }
                }
            }
        };
        validate_name(name, field)?;
        Ok(TemplateRef {
            name: name.to_string(),
            version,
        })
    }
}

impl std::fmt::Display for TemplateRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.version {
            Some(v) => write!(f, "{}:{v}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// One version of a template, as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TemplateInfo {
    pub name: String,
    pub version: i64,
    /// `name:version`, what `template` of a create names.
    pub reference: String,
    /// The snapshot it restores; kept (never expired, never collected) while
    /// this version exists.
    pub snapshot: String,
    pub backend: String,
    /// Digest of the manifest the snapshot was taken under.
    pub manifest_digest: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_sandbox: Option<String>,
    pub created_by: String,
    pub created_at_ms: i64,
}

impl TemplateInfo {
    pub fn from_record(r: TemplateRecord) -> Self {
        TemplateInfo {
            reference: format!("{}:{}", r.name, r.version),
            name: r.name,
            version: r.version,
            snapshot: r.snapshot.to_string(),
            backend: r.backend.to_string(),
            manifest_digest: r.manifest_digest,
            source_sandbox: r.source_sandbox.map(|s| s.to_string()),
            created_by: r.created_by,
            created_at_ms: r.created_at_ms,
        }
    }
}

/// Where a secret value was found: the secret's name and the artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretHit {
    pub secret: String,
    pub artifact: String,
}

/// Bytes read per block of the scan.
const SCAN_BLOCK: usize = 1 << 20;

/// Scan one file for the secret values (name -> value); the first secret
/// found, by name. Reads `SCAN_BLOCK` bytes at a time whatever the size.
pub fn scan_file(path: &Path, secrets: &BTreeMap<String, String>) -> Result<Option<String>> {
    let finders: Vec<(&str, memchr::memmem::Finder<'_>)> = secrets
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(n, v)| (n.as_str(), memchr::memmem::Finder::new(v.as_bytes())))
        .collect();
    let Some(longest) = finders.iter().map(|(_, f)| f.needle().len()).max() else {
        return Ok(None);
    };
    let overlap = longest - 1;
    let mut f = std::fs::File::open(path)
        .map_err(|e| Error::internal(format!("secret scan: open {}: {e}", path.display())))?;
    let mut buf = vec![0u8; overlap + SCAN_BLOCK];
    // buf[..kept] holds the last `overlap` bytes of what was already searched.
    let mut kept = 0usize;
    loop {
        let n = match f.read(&mut buf[kept..]) {
            Ok(0) => return Ok(None),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                return Err(Error::internal(format!(
                    "secret scan: read {}: {e}",
                    path.display()
                )))
            }
        };
        let end = kept + n;
        for (name, finder) in &finders {
            if finder.find(&buf[..end]).is_some() {
                return Ok(Some((*name).to_string()));
            }
        }
        let tail = end.min(overlap);
        buf.copy_within(end - tail..end, 0);
        kept = tail;
    }
}

/// Scan the named artifacts in `dir`; the first secret found and where.
pub fn scan_artifacts(
    dir: &Path,
    artifacts: &[String],
    secrets: &BTreeMap<String, String>,
) -> Result<Option<SecretHit>> {
    for name in artifacts {
        stasis_store::validate_artifact_name(name)?;
        if let Some(secret) = scan_file(&dir.join(name), secrets)? {
            return Ok(Some(SecretHit {
                secret,
                artifact: name.clone(),
            }));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn names_follow_the_rules_and_errors_name_the_field() {
        for ok in ["py", "python-3.12", "a", "0x_data", &"a".repeat(64)] {
            validate_name(ok, "name").unwrap();
        }
        for bad in [
            "",
            "Py",
            "-x",
            ".x",
            "a b",
            "a/b",
            "é",
            &"a".repeat(65),
            "a:1",
        ] {
            let e = validate_name(bad, "name").unwrap_err();
            assert_eq!(e.field.as_deref(), Some("name"), "{bad}");
        }
    }

    #[test]
    fn references_are_a_name_and_an_optional_positive_version() {
        let r = TemplateRef::parse("py", "template").unwrap();
        assert_eq!((r.name.as_str(), r.version), ("py", None));
        let r = TemplateRef::parse("py:12", "template").unwrap();
        assert_eq!((r.name.as_str(), r.version), ("py", Some(12)));
        assert_eq!(r.to_string(), "py:12");
        for bad in [
            "py:", "py:0", "py:-1", "py:01", "py:x", "py:1:2", ":1", "Py:1",
        ] {
            let e = TemplateRef::parse(bad, "template").unwrap_err();
            assert_eq!(e.field.as_deref(), Some("template"), "{bad}");
        }
    }

    fn secrets(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_scan_finds_a_value_anywhere_even_across_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let s = secrets(&[("API_KEY", "sk-live-0123456789abcdef"), ("EMPTY", "")]);
        let needle = b"sk-live-0123456789abcdef";
        // At every offset around a block boundary, and at the very end.
        for at in [
            0,
            SCAN_BLOCK - needle.len(),
            SCAN_BLOCK - 5,
            SCAN_BLOCK - 1,
            SCAN_BLOCK,
            3 * SCAN_BLOCK - 7,
        ] {
            let p = dir.path().join("memory.bin");
            let mut f = std::fs::File::create(&p).unwrap();
            f.write_all(&vec![0u8; at]).unwrap();
            f.write_all(needle).unwrap();
            drop(f);
            assert_eq!(
                scan_file(&p, &s).unwrap().as_deref(),
                Some("API_KEY"),
                "at {at}"
            );
        }
        // Almost the value (last byte differs) is not the value.
        let p = dir.path().join("disk.qcow2");
        let mut near = vec![7u8; SCAN_BLOCK * 2];
        near[SCAN_BLOCK - 3..SCAN_BLOCK - 3 + needle.len()].copy_from_slice(needle);
        near[SCAN_BLOCK - 3 + needle.len() - 1] = b'X';
        std::fs::write(&p, &near).unwrap();
        assert_eq!(scan_file(&p, &s).unwrap(), None);
        // No secrets (or only empty ones): nothing to find.
        assert_eq!(scan_file(&p, &secrets(&[("E", "")])).unwrap(), None);
        // Over artifacts: the hit names the secret and the artifact.
        std::fs::write(dir.path().join("fs.tar"), b"..sk-live-0123456789abcdef..").unwrap();
        let hit = scan_artifacts(dir.path(), &["disk.qcow2".into(), "fs.tar".into()], &s)
            .unwrap()
            .unwrap();
        assert_eq!(
            hit,
            SecretHit {
                secret: "API_KEY".into(),
                artifact: "fs.tar".into()
            }
        );
        // A name that is not an artifact name is refused, not followed.
        assert!(scan_artifacts(dir.path(), &["../x".into()], &s).is_err());
    }
}
