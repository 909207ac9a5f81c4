//! A daemon secret shared by every node of a metadata database: 32 random
//! bytes made by the first daemon that needs them, sealed under the store's
//! master key and kept in `daemon_keys`, so it survives restarts and every
//! node of a cluster holds the same one (signed port URLs, the console's
//! CSRF tokens). Loaded once per daemon.

use tokio::sync::OnceCell;

use stasis_core::{Error, Result, TenantId};
use stasis_meta::Meta;
use stasis_store::Store;

/// The sealing context of daemon secrets.
pub(crate) use crate::governance::DAEMON_KEY_TENANT as KEY_TENANT;

/// One named daemon secret.
pub struct DaemonKey {
    name: &'static str,
    key: OnceCell<[u8; 32]>,
}

impl DaemonKey {
    /// The secret stored as `name` (one name per use: never share a key
    /// between two purposes).
    pub const fn new(name: &'static str) -> Self {
        DaemonKey {
            name,
            key: OnceCell::const_new(),
        }
    }

    /// The secret, made and stored by the first daemon that asks.
    pub async fn get(&self, meta: &Meta, store: &Store) -> Result<&[u8; 32]> {
        self.key
            .get_or_try_init(|| async {
                let tenant = TenantId::parse(KEY_TENANT)?;
                let fresh: [u8; 32] = rand::random();
                let sealed = store.seal_secret(&tenant, self.name, &fresh);
                let stored = meta.daemon_key_or_insert(self.name, &sealed).await?;
                let key = store.open_secret(&tenant, self.name, &stored)?;
                key.try_into().map_err(|_| {
                    Error::internal(format!(
                        "the stored daemon key {} is not 32 bytes",
                        self.name
                    ))
                })
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_key_per_name_shared_by_every_daemon_of_a_database() {
        let dir = tempfile::tempdir().unwrap();
        let meta = Meta::open(&dir.path().join("meta.db")).await.unwrap();
        let store = Store::open(
            &format!("file://{}", dir.path().join("store").display()),
            stasis_store::MasterKey::insecure_dev(),
        )
        .await
        .unwrap();
        let a = *DaemonKey::new("test-key-a")
            .get(&meta, &store)
            .await
            .unwrap();
        // Another daemon (or this one restarted) gets the same key.
        let again = *DaemonKey::new("test-key-a")
            .get(&meta, &store)
            .await
            .unwrap();
        assert_eq!(a, again);
        let b = *DaemonKey::new("test-key-b")
            .get(&meta, &store)
            .await
            .unwrap();
        assert_ne!(a, b);
    }
}
