//! Reading the name a connection is for from its first bytes: the SNI of a
//! TLS ClientHello (which may span several TLS records) or the Host header
//! of an HTTP/1 request. Pure functions over what has arrived so far.

use stasis_core::manifest::network::host_name;

/// At most this many bytes are read before deciding.
pub const MAX_PEEK: usize = 16 * 1024;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sniff {
    /// Not enough bytes yet to decide.
    NeedMore,
    /// A TLS ClientHello, with its server name if it carries a valid one.
    Tls(Option<String>),
    /// An HTTP/1 request, with its Host (port removed) if valid.
    Http(Option<String>),
    /// Neither, or malformed.
    Unknown,
}

/// Decide from the bytes `buf` received so far.
pub fn sniff(buf: &[u8]) -> Sniff {
    match buf.first() {
        None => Sniff::NeedMore,
        Some(0x16) => tls(buf),
        Some(b) if b.is_ascii_uppercase() => http(buf),
        Some(_) => Sniff::Unknown,
    }
}

fn u16_at(b: &[u8], i: usize) -> Option<usize> {
    Some(u16::from_be_bytes([*b.get(i)?, *b.get(i + 1)?]) as usize)
}

/// Reassemble the handshake bytes from consecutive handshake records.
fn tls(buf: &[u8]) -> Sniff {
    let mut hs = Vec::new();
    let mut i = 0;
    loop {
        if i + 5 > buf.len() {
            return Sniff::NeedMore;
        }
        if buf[i] != 0x16 || buf[i + 1] != 3 {
            return Sniff::Unknown;
        }
        let len = u16_at(buf, i + 3).unwrap();
        if len == 0 || len > 16384 + 2048 {
            return Sniff::Unknown;
        }
        let end = i + 5 + len;
        let have = end.min(buf.len());
        hs.extend_from_slice(&buf[i + 5..have]);
        if hs.len() >= 4 {
            if hs[0] != 1 {
                return Sniff::Unknown;
            }
            let need = 4 + ((hs[1] as usize) << 16 | (hs[2] as usize) << 8 | hs[3] as usize);
            if need > MAX_PEEK {
                return Sniff::Unknown;
            }
            if hs.len() >= need {
                return match client_hello_sni(&hs[4..need]) {
                    Some(r) => Sniff::Tls(r),
                    None => Sniff::Unknown,
                };
            }
        }
        if end > buf.len() {
            return Sniff::NeedMore;
        }
        i = end;
    }
}

/// `Some(sni)` for a well-formed ClientHello body (`Some(None)`: no valid
/// server name), `None` when malformed.
fn client_hello_sni(b: &[u8]) -> Option<Option<String>> {
    let mut i = 2 + 32; // version, random
    i += 1 + *b.get(i)? as usize; // session id
    i += 2 + u16_at(b, i)?; // cipher suites
    i += 1 + *b.get(i)? as usize; // compression methods
    if i == b.len() {
        return Some(None); // no extensions
    }
    let ext_end = i + 2 + u16_at(b, i)?;
    if ext_end > b.len() {
        return None;
    }
    i += 2;
    while i + 4 <= ext_end {
        let (ty, len) = (u16_at(b, i)?, u16_at(b, i + 2)?);
        let body = b.get(i + 4..i + 4 + len)?;
        if ty == 0 {
            // server_name: list length, then (type 0, length, name).
            let list = body.get(2..2 + u16_at(body, 0)?)?;
            let mut j = 0;
            while j + 3 <= list.len() {
                let n = u16_at(list, j + 1)?;
                let name = list.get(j + 3..j + 3 + n)?;
                if list[j] == 0 {
                    let s = std::str::from_utf8(name).ok();
                    return Some(s.and_then(|s| host_name(s).ok()));
                }
                j += 3 + n;
            }
            return Some(None);
        }
        i += 4 + len;
    }
    Some(None)
}

fn http(buf: &[u8]) -> Sniff {
    let method_len = buf.iter().take_while(|b| b.is_ascii_uppercase()).count();
    if method_len == buf.len() {
        return if method_len <= 16 {
            Sniff::NeedMore
        } else {
            Sniff::Unknown
        };
    }
    if buf[method_len] != b' ' || method_len > 16 {
        return Sniff::Unknown;
    }
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if buf.len() >= MAX_PEEK {
            Sniff::Unknown
        } else {
            Sniff::NeedMore
        };
    };
    let Ok(head) = std::str::from_utf8(&buf[..end]) else {
        return Sniff::Unknown;
    };
    let mut lines = head.split("\r\n");
    let first = lines.next().unwrap_or("");
    if !first
        .rsplit(' ')
        .next()
        .unwrap_or("")
        .starts_with("HTTP/1.")
    {
        return Sniff::Unknown;
    }
    let mut hosts = lines.filter_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim().eq_ignore_ascii_case("host").then(|| v.trim())
    });
    let host = match (hosts.next(), hosts.next()) {
        (Some(h), None) => h,
        _ => return Sniff::Http(None), // none or ambiguous
    };
    let name = match host.rsplit_once(':') {
        Some((h, p)) if p.bytes().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    };
    Sniff::Http(host_name(name).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ClientHello for `sni` as TLS records of at most `frag` bytes.
    pub(crate) fn client_hello(sni: Option<&str>, frag: usize) -> Vec<u8> {
        let mut body = vec![3, 3];
        body.extend([7u8; 32]);
        body.push(0); // session id
        body.extend([0, 2, 0x13, 0x01]); // one suite
        body.extend([1, 0]); // null compression
        let mut ext = Vec::new();
        ext.extend([0xff, 0x01, 0, 1, 0]); // renegotiation_info first
        if let Some(n) = sni {
            let n = n.as_bytes();
            let mut list = vec![0u8];
            list.extend((n.len() as u16).to_be_bytes());
            list.extend(n);
            let mut sn = (list.len() as u16).to_be_bytes().to_vec();
            sn.extend(list);
            ext.extend([0, 0]);
            ext.extend((sn.len() as u16).to_be_bytes());
            ext.extend(sn);
        }
        body.extend((ext.len() as u16).to_be_bytes());
        body.extend(ext);
        let mut hs = vec![1, 0];
        hs.extend((body.len() as u16).to_be_bytes());
        hs.extend(body);
        let mut out = Vec::new();
        for c in hs.chunks(frag) {
            out.extend([0x16, 3, 1]);
            out.extend((c.len() as u16).to_be_bytes());
            out.extend(c);
        }
        out
    }

    #[test]
    fn tls_sni() {
        let ch = client_hello(Some("Allowed.Test"), 1000);
        assert_eq!(sniff(&ch), Sniff::Tls(Some("allowed.test".into())));
        assert_eq!(sniff(&client_hello(None, 1000)), Sniff::Tls(None));
        assert_eq!(
            sniff(&client_hello(Some("bad name!"), 1000)),
            Sniff::Tls(None)
        );
    }

    #[test]
    fn tls_fragmented_and_truncated() {
        let ch = client_hello(Some("other.allowed.test"), 7);
        assert_eq!(sniff(&ch), Sniff::Tls(Some("other.allowed.test".into())));
        for cut in [1, 4, 5, 9, 30, ch.len() - 1] {
            assert_eq!(sniff(&ch[..cut]), Sniff::NeedMore, "cut at {cut}");
        }
    }

    #[test]
    fn tls_garbage() {
        assert_eq!(sniff(&[0x16, 9, 9, 0, 5, 1, 2, 3, 4, 5]), Sniff::Unknown);
        assert_eq!(sniff(&[0x16, 3, 1, 0, 4, 2, 0, 0, 0]), Sniff::Unknown);
        // A ClientHello whose declared lengths run past its end.
        let mut ch = client_hello(Some("a.test"), 1000);
        let n = ch.len();
        ch[n - 12] = 0xff;
        assert!(matches!(sniff(&ch), Sniff::Unknown | Sniff::Tls(None)));
        assert_eq!(sniff(&[0u8, 1, 2]), Sniff::Unknown);
        assert_eq!(sniff(b"SSH-2.0-OpenSSH\r\n"), Sniff::Unknown);
    }

    #[test]
    fn http_host() {
        let r = b"GET / HTTP/1.1\r\nUser-Agent: x\r\nhost: Allowed.test:8080\r\n\r\n";
        assert_eq!(sniff(r), Sniff::Http(Some("allowed.test".into())));
        assert_eq!(sniff(b"GET / HTTP/1.1\r\nHost: a.test"), Sniff::NeedMore);
        assert_eq!(sniff(b"GE"), Sniff::NeedMore);
        assert_eq!(sniff(b"GET / HTTP/1.1\r\n\r\n"), Sniff::Http(None));
        assert_eq!(
            sniff(b"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n"),
            Sniff::Http(None)
        );
        assert_eq!(sniff(b"GET / FTP\r\nHost: a.test\r\n\r\n"), Sniff::Unknown);
        assert_eq!(sniff(b"GET\t/"), Sniff::Unknown);
        assert_eq!(
            sniff(b"GET / HTTP/1.0\r\nHost: 10.0.0.1\r\n\r\n"),
            Sniff::Http(None)
        );
    }
}
