//! The signed port URL token: what `/p/{token}/...` carries instead of a
//! bearer token.
//!
//! Layout (then base64url without padding), all integers big-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 1 | version (`1`) |
//! | 1 | length `n` of the sandbox id |
//! | n | sandbox id (ASCII) |
//! | 2 | port |
//! | 8 | expiry, unix milliseconds |
//! | 8 | issue time, unix milliseconds (a revocation of all of a port's URLs covers those issued up to it) |
//! | 12 | URL id (random; its hex form names the URL for revocation) |
//! | 32 | keyed BLAKE3 of everything before, under the daemon's port URL key |
//!
//! Any change to a byte (another sandbox, another port, a later expiry)
//! breaks the signature. A version byte this daemon does not know is
//! refused as malformed, so a later format can be introduced beside this one.

use stasis_core::SandboxId;

pub const VERSION: u8 = 1;
const URL_ID_LEN: usize = 12;
const MAC_LEN: usize = 32;
/// Longest token text accepted (a sandbox id is at most 64 bytes).
pub const MAX_TOKEN_LEN: usize = 200;

/// What a token grants: `port` of `sandbox` until `expires_at_ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    pub sandbox: SandboxId,
    pub port: u16,
    pub expires_at_ms: i64,
    pub issued_at_ms: i64,
    /// Hex of the 12 random id bytes.
    pub url_id: String,
}

/// Why a token is refused. Every one answers 403; the reason is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denial {
    /// Not a token of a known version and shape.
    Malformed,
    /// The signature does not match (tampered, or signed by another key).
    BadSignature,
    Expired,
    Revoked,
}

impl Denial {
    pub const ALL: [Denial; 4] = [
        Denial::Malformed,
        Denial::BadSignature,
        Denial::Expired,
        Denial::Revoked,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Denial::Malformed => "malformed",
            Denial::BadSignature => "bad_signature",
            Denial::Expired => "expired",
            Denial::Revoked => "revoked",
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            Denial::Malformed => "this is not a valid port URL",
            Denial::BadSignature => "this port URL's signature is not valid",
            Denial::Expired => "this port URL has expired",
            Denial::Revoked => "this port URL has been revoked",
        }
    }
}

/// A new random URL id (hex).
pub fn new_url_id() -> String {
    let b: [u8; URL_ID_LEN] = rand::random();
    hex(&b)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn body(c: &Claims) -> Option<Vec<u8>> {
    let id = c.sandbox.as_str().as_bytes();
    let url_id = unhex(&c.url_id).filter(|b| b.len() == URL_ID_LEN)?;
    let mut v = Vec::with_capacity(2 + id.len() + 18 + URL_ID_LEN + MAC_LEN);
    v.push(VERSION);
    v.push(u8::try_from(id.len()).ok()?);
    v.extend_from_slice(id);
    v.extend_from_slice(&c.port.to_be_bytes());
    v.extend_from_slice(&c.expires_at_ms.to_be_bytes());
    v.extend_from_slice(&c.issued_at_ms.to_be_bytes());
    v.extend_from_slice(&url_id);
    Some(v)
}

/// The token for `claims` under `key`. `None` only for claims no daemon
/// makes (a URL id that is not 12 bytes of hex).
pub fn sign(key: &[u8; 32], claims: &Claims) -> Option<String> {
    let mut v = body(claims)?;
    v.extend_from_slice(blake3::keyed_hash(key, &v).as_bytes());
    use base64::Engine;
    Some(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(&v))
}

/// The claims of a token, *not* verified: only to find which sandbox it
/// is about (to forward it to the node that runs it, which verifies).
pub fn peek(token: &str) -> Result<Claims, Denial> {
    decode(token).map(|(c, _, _)| c)
}

/// The claims of a token signed with `key` that has not expired at `now_ms`.
pub fn verify(key: &[u8; 32], token: &str, now_ms: i64) -> Result<Claims, Denial> {
    let (claims, signed, mac) = decode(token)?;
    let want = blake3::keyed_hash(key, &signed);
    // blake3::Hash compares in constant time.
    if want != blake3::Hash::from(mac) {
        return Err(Denial::BadSignature);
    }
    if now_ms >= claims.expires_at_ms {
        return Err(Denial::Expired);
    }
    Ok(claims)
}

type Decoded = (Claims, Vec<u8>, [u8; MAC_LEN]);

fn decode(token: &str) -> Result<Decoded, Denial> {
    use base64::Engine;
    if token.is_empty() || token.len() > MAX_TOKEN_LEN {
        return Err(Denial::Malformed);
    }
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .map_err(|_| Denial::Malformed)?;
    let (&version, rest) = raw.split_first().ok_or(Denial::Malformed)?;
    if version != VERSION {
        return Err(Denial::Malformed);
    }
    let (&n, rest) = rest.split_first().ok_or(Denial::Malformed)?;
    let n = n as usize;
    if rest.len() != n + 2 + 8 + 8 + URL_ID_LEN + MAC_LEN {
        return Err(Denial::Malformed);
    }
    let id = std::str::from_utf8(&rest[..n]).map_err(|_| Denial::Malformed)?;
    let sandbox = SandboxId::parse(id).map_err(|_| Denial::Malformed)?;
    let rest = &rest[n..];
    let port = u16::from_be_bytes([rest[0], rest[1]]);
    let expires_at_ms = i64::from_be_bytes(rest[2..10].try_into().expect("8 bytes"));
    let issued_at_ms = i64::from_be_bytes(rest[10..18].try_into().expect("8 bytes"));
    let url_id = hex(&rest[18..18 + URL_ID_LEN]);
    let mac: [u8; MAC_LEN] = rest[18 + URL_ID_LEN..].try_into().expect("32 bytes");
    let signed = raw[..raw.len() - MAC_LEN].to_vec();
    if port == 0 {
        return Err(Denial::Malformed);
    }
    let claims = Claims {
        sandbox,
        port,
        expires_at_ms,
        issued_at_ms,
        url_id,
    };
    Ok((claims, signed, mac))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    const KEY: [u8; 32] = [7; 32];

    fn claims() -> Claims {
        Claims {
            sandbox: SandboxId::parse("sb-0123456789abcdef0123456789abcdef").unwrap(),
            port: 8000,
            expires_at_ms: 2_000_000,
            issued_at_ms: 1_000_000,
            url_id: new_url_id(),
        }
    }

    fn raw(t: &str) -> Vec<u8> {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(t)
            .unwrap()
    }

    fn enc(b: &[u8]) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
    }

    #[test]
    fn a_signed_token_verifies_until_it_expires() {
        let c = claims();
        let t = sign(&KEY, &c).unwrap();
        assert!(t.len() <= MAX_TOKEN_LEN, "{}", t.len());
        assert!(t
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'));
        assert_eq!(verify(&KEY, &t, 1_500_000).unwrap(), c);
        assert_eq!(peek(&t).unwrap(), c);
        assert_eq!(verify(&KEY, &t, 2_000_000), Err(Denial::Expired));
        assert_eq!(verify(&KEY, &t, 9_000_000), Err(Denial::Expired));
    }

    #[test]
    fn every_changed_byte_breaks_it() {
        let t = sign(&KEY, &claims()).unwrap();
        let good = raw(&t);
        for i in 0..good.len() {
            let mut b = good.clone();
            b[i] ^= 0x01;
            let e = verify(&KEY, &enc(&b), 1_500_000).unwrap_err();
            assert!(
                matches!(e, Denial::BadSignature | Denial::Malformed),
                "byte {i}: {e:?}"
            );
        }
        // Another key.
        assert_eq!(verify(&[8; 32], &t, 1_500_000), Err(Denial::BadSignature));
    }

    #[test]
    fn another_port_or_sandbox_is_a_bad_signature() {
        let c = claims();
        let t = sign(&KEY, &c).unwrap();
        let mut b = raw(&t);
        let n = b[1] as usize;
        // Port 8000 -> 8001 (same length, valid shape).
        b[2 + n + 1] = b[2 + n + 1].wrapping_add(1);
        assert_eq!(verify(&KEY, &enc(&b), 1_500_000), Err(Denial::BadSignature));
        // Another sandbox id of the same length.
        let mut b = raw(&t);
        b[2 + n - 1] = if b[2 + n - 1] == b'f' { b'e' } else { b'f' };
        let e = verify(&KEY, &enc(&b), 1_500_000).unwrap_err();
        assert_eq!(e, Denial::BadSignature);
        // A later expiry.
        let mut b = raw(&t);
        b[2 + n + 2] = 0x7f;
        assert_eq!(verify(&KEY, &enc(&b), 1_500_000), Err(Denial::BadSignature));
    }

    #[test]
    fn malformed_tokens() {
        let t = sign(&KEY, &claims()).unwrap();
        let good = raw(&t);
        let mut v2 = good.clone();
        v2[0] = 2;
        let mut zero_port = good.clone();
        let n = good[1] as usize;
        zero_port[2 + n] = 0;
        zero_port[3 + n] = 0;
        for bad in [
            String::new(),
            "not base64 !".to_string(),
            "A".repeat(MAX_TOKEN_LEN + 1),
            enc(&good[..good.len() - 1]),
            enc(&[good.clone(), vec![0]].concat()),
            enc(&v2),
            enc(&zero_port),
            enc(&[1]),
        ] {
            assert_eq!(verify(&KEY, &bad, 0), Err(Denial::Malformed), "{bad}");
            assert_eq!(peek(&bad), Err(Denial::Malformed), "{bad}");
        }
        // A sandbox id that is not an id.
        let mut c = claims();
        c.url_id = "zz".into();
        assert!(sign(&KEY, &c).is_none());
    }
}
