//! The sealed object formats: chunk and record headers and AADs, the
//! compression rule, and encoding/verifying one chunk object.

use crate::crypto::{self, TenantKeys};
use crate::{ChunkAddr, ChunkRef};
use stasis_core::{Error, Result, SnapshotId, TenantId};

pub(crate) const CHUNK_MAGIC: u8 = b'S';
pub(crate) const RECORD_MAGIC: u8 = b'R';
pub(crate) const FORMAT_V1: u8 = 1;
/// Records sealed under a data key of generation > 0: 'R' 2 gen(u32 LE) sealed.
pub(crate) const FORMAT_V2: u8 = 2;
pub(crate) const FLAG_RAW: u8 = 0;
pub(crate) const FLAG_ZSTD: u8 = 1;

pub(crate) fn chunk_aad(tenant: &TenantId, addr: &ChunkAddr, flag: u8) -> Vec<u8> {
    let mut a = b"stasis-chunk-v1\0".to_vec();
    a.extend_from_slice(tenant.as_str().as_bytes());
    a.push(0);
    a.extend_from_slice(&addr.0);
    a.push(flag);
    a
}

pub(crate) fn record_aad(tenant: &TenantId, id: &SnapshotId) -> Vec<u8> {
    let mut a = b"stasis-record-v1\0".to_vec();
    a.extend_from_slice(tenant.as_str().as_bytes());
    a.push(0);
    a.extend_from_slice(id.as_str().as_bytes());
    a
}

/// The data-key generation a sealed record names, and where its sealed part starts.
pub(crate) fn record_header(b: &[u8]) -> Option<(u32, usize)> {
    match b {
        [RECORD_MAGIC, FORMAT_V1, ..] => Some((0, 2)),
        [RECORD_MAGIC, FORMAT_V2, g0, g1, g2, g3, ..] => {
            Some((u32::from_le_bytes([*g0, *g1, *g2, *g3]), 6))
        }
        _ => None,
    }
}

/// Record AAD, bound to the data-key generation from generation 1 on.
pub(crate) fn record_aad_gen(tenant: &TenantId, id: &SnapshotId, gen: u32) -> Vec<u8> {
    let mut a = record_aad(tenant, id);
    if gen > 0 {
        a.extend_from_slice(b"\0gen");
        a.extend_from_slice(&gen.to_le_bytes());
    }
    a
}

/// Compress if it saves at least 1/16, returns (flag, payload).
pub(crate) fn maybe_compress(data: &[u8], level: i32) -> (u8, Vec<u8>) {
    if let Ok(c) = zstd::bulk::compress(data, level) {
        if c.len() < data.len() - data.len() / 16 {
            return (FLAG_ZSTD, c);
        }
    }
    (FLAG_RAW, data.to_vec())
}

/// Decompress a payload of `flag` whose plaintext must be exactly `len` bytes.
pub(crate) fn decompress_exact(
    flag: u8,
    payload: Vec<u8>,
    len: usize,
    what: &str,
) -> Result<Vec<u8>> {
    let plain = match flag {
        FLAG_RAW => payload,
        FLAG_ZSTD => zstd::bulk::decompress(&payload, len)
            .map_err(|e| Error::integrity(format!("{what}: decompression failed: {e}")))?,
        f => return Err(Error::integrity(format!("{what}: unknown flag {f}"))),
    };
    if plain.len() != len {
        return Err(Error::integrity(format!(
            "{what}: {} bytes, record says {len}",
            plain.len()
        )));
    }
    Ok(plain)
}

pub(crate) fn encode_chunk(
    keys: &TenantKeys,
    tenant: &TenantId,
    addr: &ChunkAddr,
    data: &[u8],
    level: i32,
) -> Vec<u8> {
    let (flag, payload) = maybe_compress(data, level);
    let sealed = crypto::seal(&keys.chunk, &chunk_aad(tenant, addr, flag), &payload);
    let mut out = Vec::with_capacity(3 + sealed.len());
    out.extend_from_slice(&[CHUNK_MAGIC, FORMAT_V1, flag]);
    out.extend_from_slice(&sealed);
    out
}

/// Verify a chunk object against the record's reference: AEAD tag (binds tenant,
/// address and compression flag), exact length, and keyed hash of the plaintext.
pub(crate) fn decode_chunk(
    keys: &TenantKeys,
    tenant: &TenantId,
    r: &ChunkRef,
    obj: &[u8],
) -> Result<Vec<u8>> {
    let what = format!("chunk {}", r.addr.to_hex());
    if obj.len() < 3 || obj[0] != CHUNK_MAGIC || obj[1] != FORMAT_V1 {
        return Err(Error::integrity(format!("{what}: bad header")));
    }
    let flag = obj[2];
    let payload = crypto::open(
        &keys.chunk,
        &chunk_aad(tenant, &r.addr, flag),
        &obj[3..],
        &what,
    )?;
    let plain = decompress_exact(flag, payload, r.len as usize, &what)?;
    if keys.address(&plain) != r.addr.0 {
        return Err(Error::integrity(format!("{what}: content hash mismatch")));
    }
    Ok(plain)
}
