//! The daemon id: generated once, on a daemon's first start, and kept in its
//! data dir (`<data-dir>/daemon-id`). It names what this daemon owns on the
//! host beside other daemons: the process backend's cgroups and supervisors
//! sit under `<cgroup-parent>/.daemon-<id>/`, and reconcile only ever looks
//! there. Several daemons (a service, `stasis demo`, `stasis bench`, tests)
//! can therefore share one cgroup parent without touching each other.
//!
//! Not the cluster's `--node-id`: that names a node among daemons sharing a
//! metadata database; this names one data dir on one host.

use std::io::Write;
use std::path::Path;

use stasis_core::{Error, Result};

/// The file in the data dir holding the id.
pub const FILE: &str = "daemon-id";

/// 16 lowercase hex digits (64 random bits).
fn valid(id: &str) -> bool {
    id.len() == 16
        && id
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// This data dir's daemon id: read it, or generate and write it on the
/// first start. Two daemons starting at once on the same (empty) data dir
/// agree on one id: the file is published by a hard link, which fails when
/// it already exists, and the loser reads the winner's.
pub fn load_or_create(data_dir: &Path) -> Result<String> {
    let path = data_dir.join(FILE);
    let read = |p: &Path| -> Result<Option<String>> {
        match std::fs::read_to_string(p) {
            Ok(s) => {
                let id = s.trim().to_string();
                if valid(&id) {
                    Ok(Some(id))
                } else {
                    Err(Error::internal(format!(
                        "{} does not hold a daemon id (16 hex digits): {id:?}",
                        p.display()
                    )))
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::internal(format!("read {}: {e}", p.display()))),
        }
    };
    if let Some(id) = read(&path)? {
        return Ok(id);
    }
    let id = hex::encode(rand::random::<[u8; 8]>());
    let tmp = data_dir.join(format!(".{FILE}.{id}.tmp"));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|mut f| {
            writeln!(f, "{id}")?;
            f.sync_all()
        });
    let linked = written.and_then(|()| std::fs::hard_link(&tmp, &path));
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => Ok(id),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            read(&path)?.ok_or_else(|| Error::internal(format!("{} vanished", path.display())))
        }
        Err(e) => Err(Error::internal(format!("write {}: {e}", path.display()))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_once_and_kept() {
        let d = tempfile::tempdir().unwrap();
        let a = load_or_create(d.path()).unwrap();
        assert!(valid(&a), "{a}");
        assert_eq!(load_or_create(d.path()).unwrap(), a);
        // Another data dir: another daemon, another id.
        let e = tempfile::tempdir().unwrap();
        assert_ne!(load_or_create(e.path()).unwrap(), a);
        // Only the id file is left in the data dir (no temporary files).
        let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().flatten().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn a_damaged_id_is_an_error_not_a_new_identity() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(FILE), "../../etc\n").unwrap();
        let e = load_or_create(d.path()).unwrap_err();
        assert!(e.message.contains("daemon id"), "{}", e.message);
    }
}
