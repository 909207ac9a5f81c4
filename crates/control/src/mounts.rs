//! Read-only input mounts: which host paths a manifest may mount.
//!
//! The operator names allowed roots (`stasis serve --allow-mount DIR`). A
//! manifest mount's source is canonicalized (symlinks resolved) and must
//! exist and lie under one of them. This check runs at create, and again
//! before every resume and restore, so a root the operator has since removed
//! (or a source that was swapped for a symlink pointing elsewhere) is refused
//! then too. Backends receive the canonical paths.

use std::path::{Path, PathBuf};

use stasis_core::{Error, ErrorCode, Manifest, Result};

/// Canonicalize the operator's allowed roots; each must be an existing directory.
pub fn allowed_roots(dirs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    dirs.iter()
        .map(|d| {
            let c = d
                .canonicalize()
                .map_err(|e| Error::invalid(format!("--allow-mount {}: {e}", d.display())))?;
            if !c.is_dir() {
                return Err(Error::invalid(format!(
                    "--allow-mount {}: not a directory",
                    d.display()
                )));
            }
            Ok(c)
        })
        .collect()
}

/// The manifest with every mount source replaced by its canonical host path,
/// or `invalid_manifest` naming `mounts[i].source` when a source is missing
/// or not under an allowed root.
pub fn resolve(manifest: &Manifest, roots: &[PathBuf]) -> Result<Manifest> {
    let mut m = manifest.clone();
    for (i, mount) in m.mounts.iter_mut().enumerate() {
        let field = format!("mounts[{i}].source");
        let bad = |msg: String| {
            Error::new(ErrorCode::InvalidManifest, format!("{field}: {msg}")).with_field(&field)
        };
        let canon = Path::new(&mount.source)
            .canonicalize()
            .map_err(|e| bad(format!("{}: {e}", mount.source)))?;
        if !roots.iter().any(|r| canon.starts_with(r)) {
            return Err(bad(if roots.is_empty() {
                format!(
                    "{} is not allowed: this daemon allows no mounts (stasis serve --allow-mount DIR)",
                    mount.source
                )
            } else {
                format!(
                    "{} (resolved to {}) is not under a directory the operator allowed",
                    mount.source,
                    canon.display()
                )
            }));
        }
        let md = std::fs::metadata(&canon).map_err(|e| bad(format!("{}: {e}", mount.source)))?;
        if !(md.is_dir() || md.is_file()) {
            return Err(bad(format!(
                "{} is neither a directory nor a regular file",
                mount.source
            )));
        }
        mount.source = canon.to_string_lossy().into_owned();
    }
    Ok(m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stasis_core::manifest::Mount;

    fn with_mount(src: &Path) -> Manifest {
        Manifest {
            mounts: vec![Mount {
                source: src.to_string_lossy().into_owned(),
                target: "/input".into(),
            }],
            ..Manifest::default()
        }
    }

    #[test]
    fn sources_must_exist_under_an_allowed_root() {
        let t = tempfile::tempdir().unwrap();
        let allowed = t.path().join("allowed");
        let other = t.path().join("other");
        std::fs::create_dir_all(allowed.join("data")).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(allowed.join("file.txt"), b"x").unwrap();
        std::os::unix::fs::symlink(&other, allowed.join("escape")).unwrap();
        let roots = allowed_roots(std::slice::from_ref(&allowed)).unwrap();

        let ok = resolve(&with_mount(&allowed.join("data")), &roots).unwrap();
        assert_eq!(
            Path::new(&ok.mounts[0].source),
            roots[0].join("data").as_path()
        );
        resolve(&with_mount(&allowed.join("file.txt")), &roots).unwrap();

        for bad in [
            other.clone(),
            allowed.join("escape"),
            allowed.join("missing"),
            PathBuf::from("/etc"),
        ] {
            let e = resolve(&with_mount(&bad), &roots).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidManifest, "{}", bad.display());
            assert_eq!(e.field.as_deref(), Some("mounts[0].source"));
        }
        // No allowed roots: nothing may be mounted.
        let e = resolve(&with_mount(&allowed.join("data")), &[]).unwrap_err();
        assert!(e.message.contains("--allow-mount"), "{}", e.message);
        assert!(allowed_roots(&[t.path().join("nope")]).is_err());
    }
}
