//! Keys and sealing.
//!
//! Key hierarchy (all keys 256 bit):
//!
//! ```text
//! master key (file / env / insecure dev; NEVER written to the store)
//!  ├─ wrap key    = blake3::derive_key("stasis 2026-12 master wrap v1", master)
//!  │    └─ wraps each tenant's random data key:  tenants/<t>/key
//!  │       (XChaCha20-Poly1305, AAD = "stasis-tenant-key-v1\0" || tenant)
//!  │    └─ seals the store-wide `keycheck` object, so a wrong master key is
//!  │       refused at `Store::open`, before anything is read or written
//!  └─ export key  = blake3::derive_key("stasis 2026-12 export wrap v1", master)
//!       └─ wraps the random per-file key of an export file
//!
//! tenant data key (random, per tenant)
//!  ├─ address key = derive_key("... chunk address v1")  -> chunk address = keyed blake3(plaintext)
//!  ├─ chunk key   = derive_key("... chunk encryption v1") -> XChaCha20-Poly1305 of chunks
//!  ├─ record key  = derive_key("... record encryption v1") -> snapshot records
//!  └─ cdc seed    = derive_key("... cdc seed v1")[..8]     -> fastcdc gear seed
//! ```
//!
//! The address is keyed per tenant: the same plaintext has unrelated addresses
//! in two tenants (no cross-tenant dedup, no way to test "does tenant X hold
//! this file" from object names), and the chunking seed is per tenant, so the
//! sizes of stored objects do not fingerprint known content either.

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;
use stasis_core::{Error, ErrorCode, Result};
use std::path::Path;

pub const NONCE_LEN: usize = 24;
pub const TAG_LEN: usize = 16;

/// The key that wraps every tenant's data key. Lives outside the store.
#[derive(Clone)]
pub struct MasterKey {
    key: [u8; 32],
    insecure: bool,
}

impl std::fmt::Debug for MasterKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MasterKey({}, fingerprint {})",
            if self.insecure {
                "INSECURE DEV KEY"
            } else {
                "secret"
            },
            self.fingerprint()
        )
    }
}

impl Drop for MasterKey {
    fn drop(&mut self) {
        wipe(&mut self.key);
    }
}

fn wipe(b: &mut [u8]) {
    for x in b.iter_mut() {
        // SAFETY: plain volatile write to a valid &mut u8, so the wipe is not optimised away.
        unsafe { std::ptr::write_volatile(x, 0) };
    }
}

fn parse_ring(text: &str, what: &str) -> Result<Vec<MasterKey>> {
    let mut out: Vec<MasterKey> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        for word in line.split_whitespace() {
            let k = MasterKey::from_bytes(parse_key_text(word, &format!("{what} line {}", i + 1))?);
            if !out.iter().any(|o| o.fingerprint() == k.fingerprint()) {
                out.push(k);
            }
        }
    }
    if out.is_empty() {
        return Err(Error::invalid(format!("{what}: no key in it")));
    }
    Ok(out)
}

fn parse_key_text(text: &str, what: &str) -> Result<[u8; 32]> {
    let t = text.trim();
    let bytes = hex::decode(t).map_err(|_| {
        Error::invalid(format!(
            "{what}: expected 64 hex characters (32 bytes), e.g. from `openssl rand -hex 32`"
        ))
    })?;
    <[u8; 32]>::try_from(bytes.as_slice())
        .map_err(|_| Error::invalid(format!("{what}: expected 32 bytes, got {}", bytes.len())))
}

impl MasterKey {
    pub fn from_bytes(key: [u8; 32]) -> Self {
        MasterKey {
            key,
            insecure: false,
        }
    }

    /// A fresh random key (for `stasis keygen`-style tooling); see [`MasterKey::to_hex`].
    pub fn generate() -> Self {
        let mut key = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut key);
        Self::from_bytes(key)
    }

    pub fn to_hex(&self) -> String {
        hex::encode(self.key)
    }

    /// A key file holds either 32 raw bytes or 64 hex characters (surrounding
    /// whitespace ignored). A file readable by group/other is accepted with a warning.
    pub fn from_file(path: &Path) -> Result<Self> {
        let data = std::fs::read(path)
            .map_err(|e| Error::invalid(format!("master key file {}: {e}", path.display())))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            if let Ok(m) = std::fs::metadata(path) {
                if m.permissions().mode() & 0o077 != 0 {
                    tracing::warn!(path = %path.display(), "master key file is readable by group/other; chmod 600 it");
                }
            }
        }
        let what = format!("master key file {}", path.display());
        if data.len() == 32 {
            let mut k = [0u8; 32];
            k.copy_from_slice(&data);
            return Ok(Self::from_bytes(k));
        }
        let text = std::str::from_utf8(&data)
            .map_err(|_| Error::invalid(format!("{what}: neither 32 raw bytes nor hex")))?;
        Ok(Self::from_bytes(parse_key_text(text, &what)?))
    }

    /// A key file listing several master keys (key generations): 32 raw
    /// bytes (one key), or text with one key of 64 hex characters per line
    /// (blank lines and `#` comments ignored). The order does not matter:
    /// the deployment's metadata names the generation in use.
    pub fn ring_from_file(path: &Path) -> Result<Vec<Self>> {
        let data = std::fs::read(path)
            .map_err(|e| Error::invalid(format!("master key file {}: {e}", path.display())))?;
        if data.len() == 32 {
            return Ok(vec![Self::from_file(path)?]);
        }
        let what = format!("master key file {}", path.display());
        let text = std::str::from_utf8(&data)
            .map_err(|_| Error::invalid(format!("{what}: neither 32 raw bytes nor hex")))?;
        let ring = parse_ring(text, &what)?;
        if ring.len() == 1 {
            // Same warnings as a single-key file.
            return Ok(vec![Self::from_file(path)?]);
        }
        Ok(ring)
    }

    /// Several keys in one env var: hex keys separated by whitespace or commas.
    pub fn ring_from_env(var: &str) -> Result<Vec<Self>> {
        let v = std::env::var(var)
            .map_err(|_| Error::invalid(format!("master key env var {var} is not set")))?;
        parse_ring(&v.replace(',', "\n"), &format!("master key env var {var}"))
    }

    /// Parse one key given as 64 hex characters.
    pub fn from_hex(text: &str) -> Result<Self> {
        Ok(Self::from_bytes(parse_key_text(text, "master key")?))
    }

    /// The env var holds 64 hex characters.
    pub fn from_env(var: &str) -> Result<Self> {
        let v = std::env::var(var)
            .map_err(|_| Error::invalid(format!("master key env var {var} is not set")))?;
        Ok(Self::from_bytes(parse_key_text(
            &v,
            &format!("master key env var {var}"),
        )?))
    }

    /// A fixed, publicly known key. Anyone can decrypt a store sealed with it:
    /// for demos and tests only (the daemon prints a warning when it is used).
    pub fn insecure_dev() -> Self {
        MasterKey {
            key: blake3::derive_key("stasis 2026-12 INSECURE well-known dev master key", b""),
            insecure: true,
        }
    }

    pub fn is_insecure_dev(&self) -> bool {
        self.insecure
    }

    /// A public fingerprint (safe to log): tells two master keys apart without revealing them.
    pub fn fingerprint(&self) -> String {
        hex::encode(&blake3::derive_key("stasis 2026-12 master fingerprint v1", &self.key)[..8])
    }

    /// Seal a tenant secret's value for storage outside the store (the
    /// metadata database). Bound to tenant and name: a sealed value moved to
    /// another tenant or name does not open.
    pub fn seal_secret(&self, tenant: &str, name: &str, plaintext: &[u8]) -> Vec<u8> {
        let mut key = blake3::derive_key("stasis 2026-12 tenant secret v1", &self.key);
        let out = seal(&key, &secret_aad(tenant, name), plaintext);
        wipe(&mut key);
        out
    }

    /// Inverse of [`MasterKey::seal_secret`].
    pub fn open_secret(&self, tenant: &str, name: &str, sealed: &[u8]) -> Result<Vec<u8>> {
        let mut key = blake3::derive_key("stasis 2026-12 tenant secret v1", &self.key);
        let out = open(
            &key,
            &secret_aad(tenant, name),
            sealed,
            &format!("secret {name}"),
        );
        wipe(&mut key);
        out
    }

    pub(crate) fn wrap_key(&self) -> [u8; 32] {
        blake3::derive_key("stasis 2026-12 master wrap v1", &self.key)
    }

    /// The key that wraps a tenant's data key: the master wrap key alone
    /// (stores made before key-encryption keys), or bound to the tenant's
    /// key-encryption key, which lives outside the store.
    pub(crate) fn tenant_wrap_key(&self, kek: Option<&[u8; 32]>) -> [u8; 32] {
        match kek {
            None => self.wrap_key(),
            Some(k) => {
                let mut m = self.wrap_key().to_vec();
                m.extend_from_slice(k);
                let out = blake3::derive_key("stasis 2026-12 tenant wrap v2", &m);
                wipe(&mut m);
                out
            }
        }
    }

    pub(crate) fn export_key(&self) -> [u8; 32] {
        blake3::derive_key("stasis 2026-12 export wrap v1", &self.key)
    }
}

/// Keys derived from one tenant's data key.
pub(crate) struct TenantKeys {
    /// The data key's generation (0: the tenant's first key).
    pub gen: u32,
    pub addr: [u8; 32],
    pub chunk: [u8; 32],
    pub record: [u8; 32],
    pub cdc_seed: u64,
}

impl TenantKeys {
    pub fn derive(gen: u32, data_key: &[u8; 32]) -> Self {
        let seed = blake3::derive_key("stasis 2026-12 cdc seed v1", data_key);
        TenantKeys {
            gen,
            addr: blake3::derive_key("stasis 2026-12 chunk address v1", data_key),
            chunk: blake3::derive_key("stasis 2026-12 chunk encryption v1", data_key),
            record: blake3::derive_key("stasis 2026-12 record encryption v1", data_key),
            cdc_seed: u64::from_le_bytes(seed[..8].try_into().expect("8 bytes")),
        }
    }

    pub fn address(&self, plaintext: &[u8]) -> [u8; 32] {
        *blake3::keyed_hash(&self.addr, plaintext).as_bytes()
    }

    /// The address of `len` zero bytes (untouched guest pages, empty disk
    /// clusters): what block scans and restores recognise without reading.
    pub fn zero_address(&self, len: u32) -> [u8; 32] {
        self.address(&vec![0u8; len as usize])
    }
}

impl Drop for TenantKeys {
    fn drop(&mut self) {
        wipe(&mut self.addr);
        wipe(&mut self.chunk);
        wipe(&mut self.record);
    }
}

pub(crate) fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    rand::rngs::OsRng.fill_bytes(&mut b);
    b
}

/// Returns nonce || ciphertext+tag.
pub(crate) fn seal(key: &[u8; 32], aad: &[u8], plaintext: &[u8]) -> Vec<u8> {
    let cipher = XChaCha20Poly1305::new(key.into());
    let nonce: [u8; NONCE_LEN] = random_bytes();
    let ct = cipher
        .encrypt(
            XNonce::from_slice(&nonce),
            Payload {
                msg: plaintext,
                aad,
            },
        )
        .expect("XChaCha20-Poly1305 encryption cannot fail for in-memory buffers");
    let mut out = Vec::with_capacity(NONCE_LEN + ct.len());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&ct);
    out
}

/// Inverse of [`seal`]; `what` names the object in the error.
pub(crate) fn open(key: &[u8; 32], aad: &[u8], sealed: &[u8], what: &str) -> Result<Vec<u8>> {
    if sealed.len() < NONCE_LEN + TAG_LEN {
        return Err(Error::integrity(format!(
            "{what}: truncated ({} bytes)",
            sealed.len()
        )));
    }
    let (nonce, ct) = sealed.split_at(NONCE_LEN);
    XChaCha20Poly1305::new(key.into())
        .decrypt(XNonce::from_slice(nonce), Payload { msg: ct, aad })
        .map_err(|_| {
            Error::integrity(format!(
                "{what}: authentication failed (modified, truncated, swapped or foreign data)"
            ))
        })
}

pub(crate) fn wrong_master_key(detail: &str) -> Error {
    Error::new(
        ErrorCode::Unauthorized,
        format!("wrong master key: {detail} was sealed with a different master key"),
    )
}

fn secret_aad(tenant: &str, name: &str) -> Vec<u8> {
    let mut a = b"stasis-secret-v1\0".to_vec();
    a.extend_from_slice(tenant.as_bytes());
    a.push(0);
    a.extend_from_slice(name.as_bytes());
    a
}

pub(crate) fn tenant_key_aad(tenant: &str) -> Vec<u8> {
    let mut a = b"stasis-tenant-key-v1\0".to_vec();
    a.extend_from_slice(tenant.as_bytes());
    a
}

/// AAD of a data-key wrap: tenant, generation and the wrapping master key's
/// fingerprint, so a wrap moved to another tenant, generation or name does not open.
pub(crate) fn tenant_key_aad_v2(tenant: &str, gen: u32, fp: &str) -> Vec<u8> {
    let mut a = b"stasis-tenant-key-v2\0".to_vec();
    a.extend_from_slice(tenant.as_bytes());
    a.push(0);
    a.extend_from_slice(&gen.to_le_bytes());
    a.extend_from_slice(fp.as_bytes());
    a
}

pub(crate) fn wipe_key(k: &mut [u8; 32]) {
    wipe(k);
}

pub(crate) const KEYCHECK_AAD: &[u8] = b"stasis-keycheck-v1";
pub(crate) const KEYCHECK_PLAIN: &[u8] = b"stasis store master key check v1";
