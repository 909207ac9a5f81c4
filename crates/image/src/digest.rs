//! `sha256:<hex>` digests, as OCI names blobs: parsing, hashing files and
//! streams, and a reader that hashes what passes through it.

use std::fmt;
use std::io::{self, Read};
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use stasis_core::{Error, Result};

/// A sha256 content digest, written `sha256:<64 lowercase hex>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Digest(String);

impl Digest {
    /// Parse `sha256:<64 hex>`; anything else (other algorithms, bad hex,
    /// path characters) is refused.
    pub fn parse(s: &str) -> Result<Digest> {
        let hex = s
            .strip_prefix("sha256:")
            .ok_or_else(|| Error::invalid(format!("{s:?} is not a sha256 digest")))?;
        if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return Err(Error::invalid(format!(
                "{s:?} is not a sha256 digest (64 lowercase hex digits)"
            )));
        }
        Ok(Digest(s.to_string()))
    }

    pub fn of_bytes(b: &[u8]) -> Digest {
        Digest(format!("sha256:{}", hex::encode(Sha256::digest(b))))
    }

    pub fn of_file(path: &Path) -> Result<Digest> {
        let mut f = crate::owned::open(path)
            .map_err(|e| Error::from(e).context(format!("open {}", path.display())))?;
        let mut h = Hasher::default();
        io::copy(&mut f, &mut h)?;
        Ok(h.finish())
    }

    /// The 64 hex digits (a safe file name).
    pub fn hex(&self) -> &str {
        &self.0[7..]
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Digest {
    type Error = Error;
    fn try_from(s: String) -> Result<Digest> {
        Digest::parse(&s)
    }
}

impl From<Digest> for String {
    fn from(d: Digest) -> String {
        d.0
    }
}

/// An incremental sha256 (also an `io::Write` sink).
#[derive(Default)]
pub struct Hasher(Sha256);

impl Hasher {
    pub fn update(&mut self, b: &[u8]) {
        self.0.update(b);
    }
    /// Length-prefixed field, so concatenations cannot collide.
    pub fn field(&mut self, b: &[u8]) {
        self.0.update((b.len() as u64).to_le_bytes());
        self.0.update(b);
    }
    pub fn finish(self) -> Digest {
        Digest(format!("sha256:{}", hex::encode(self.0.finalize())))
    }
}

impl io::Write for Hasher {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.update(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Hashes everything read through it.
pub struct HashingReader<R> {
    inner: R,
    hasher: Hasher,
}

impl<R: Read> HashingReader<R> {
    pub fn new(inner: R) -> Self {
        HashingReader {
            inner,
            hasher: Hasher::default(),
        }
    }
    /// Drain the rest and return the digest of everything read.
    pub fn finish(mut self) -> io::Result<Digest> {
        io::copy(&mut self.inner, &mut self.hasher)?;
        Ok(self.hasher.finish())
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // fixtures on the tests' own temp dirs
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_only_sha256_hex() {
        let d = Digest::of_bytes(b"x");
        assert_eq!(Digest::parse(d.as_str()).unwrap(), d);
        assert_eq!(d.hex().len(), 64);
        for bad in [
            "sha512:00",
            "sha256:../../etc/passwd",
            "sha256:ABCDEF",
            &format!("sha256:{}", "A".repeat(64)),
            "",
        ] {
            assert!(Digest::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn hashing_reader_matches_of_bytes() {
        let mut r = HashingReader::new(&b"hello world"[..]);
        let mut first = [0u8; 5];
        r.read_exact(&mut first).unwrap();
        assert_eq!(r.finish().unwrap(), Digest::of_bytes(b"hello world"));
    }
}
