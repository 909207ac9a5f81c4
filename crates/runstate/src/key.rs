//! The server's run-state key: 32 random bytes in `<data-dir>/runstate.key`
//! (64 hex digits, mode 0600), created on first use.
//!
//! Why a separate file and not a key derived from the store master key: the
//! master key is an operator secret that may live only in an environment
//! variable and is deliberately never stored or handed beyond the snapshot
//! store; a run-state MAC key needs no such ceremony, can be rotated on its
//! own (delete the file: outstanding documents become unverifiable, nothing
//! else changes), and its compromise lets an attacker forge run-state
//! documents only — never read snapshots. Run state documents are bound to
//! the daemon's own metadata anyway (the run must exist there), so a key
//! local to the data dir loses nothing.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use rand::RngCore;
use sha2::Digest;

use stasis_core::{Error, Result};

#[derive(Clone)]
pub struct RunKey([u8; 32]);

impl std::fmt::Debug for RunKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RunKey({})", self.id())
    }
}

impl RunKey {
    pub fn from_bytes(b: [u8; 32]) -> Self {
        RunKey(b)
    }

    pub fn generate() -> Self {
        let mut b = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut b);
        RunKey(b)
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }

    /// Public identifier of the key (not secret): names which key signed a document.
    pub fn id(&self) -> String {
        let mut h = sha2::Sha256::new();
        h.update(b"stasis-runstate-key-id\0");
        h.update(self.0);
        hex::encode(&h.finalize()[..8])
    }

    fn parse(text: &str, path: &Path) -> Result<Self> {
        let b = hex::decode(text.trim())
            .map_err(|_| Error::internal(format!("{}: not 64 hex digits", path.display())))?;
        let b: [u8; 32] = b
            .try_into()
            .map_err(|_| Error::internal(format!("{}: not 64 hex digits", path.display())))?;
        Ok(RunKey(b))
    }

    /// Read the key file, creating it (0600, atomically) when it is missing.
    /// A key file readable by group or others is refused.
    pub fn load_or_create(path: &Path) -> Result<Self> {
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let mode = std::fs::metadata(path)?.permissions().mode();
                if mode & 0o077 != 0 {
                    return Err(Error::internal(format!(
                        "{} is accessible by group or others (mode {:o}); chmod 600 it",
                        path.display(),
                        mode & 0o777
                    )));
                }
                Self::parse(&text, path)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = Self::generate();
                let tmp = path.with_extension(format!("tmp{}", std::process::id()));
                {
                    let mut f = std::fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .mode(0o600)
                        .open(&tmp)?;
                    f.write_all(hex::encode(key.0).as_bytes())?;
                    f.write_all(b"\n")?;
                    f.sync_all()?;
                }
                // link(2) fails if somebody else created the key meanwhile: use theirs.
                let linked = std::fs::hard_link(&tmp, path);
                let _ = std::fs::remove_file(&tmp);
                match linked {
                    Ok(()) => {
                        if let Some(dir) = path.parent() {
                            if let Ok(d) = std::fs::File::open(dir) {
                                let _ = d.sync_all();
                            }
                        }
                        Ok(key)
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        Self::load_or_create(path)
                    }
                    Err(e) => Err(e.into()),
                }
            }
            Err(e) => Err(e.into()),
        }
    }
}
