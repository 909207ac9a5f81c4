//! The network part of the manifest: which destinations a sandbox may reach.
//!
//! `allow` and `deny` hold entries of one syntax ([`Entry::parse`]):
//! - a host name, `pypi.org` (any port) or `pypi.org:443`;
//! - a one-label wildcard, `*.pythonhosted.org[:port]`: exactly one more
//!   label in front of a suffix of at least two labels (`*.com`, `*`,
//!   `a.*.b` and `*x.org` are refused);
//! - an address or network, `10.1.2.3`, `10.1.0.0/16`, either with an
//!   optional `:port`; `[2001:db8::1]:443`, or an IPv6 network without port
//!   (`2001:db8::/32`).
//!
//! `deny` wins over `allow`. A deny entry must be able to take something
//! away from the allow list, otherwise it is refused as a mistake: a denied
//! name or wildcard must be covered by an allowed name or wildcard (same
//! port or any port), a denied network must overlap an allowed network or,
//! since the real addresses of allowed names are checked against it too,
//! stand beside at least one allowed name.

use serde::{Deserialize, Serialize};
use std::net::IpAddr;

use super::bad;
use crate::error::Error;

/// At most this many entries in each of `allow` and `deny`.
pub const MAX_ENTRIES: usize = 256;

/// Egress policy. Default: no network at all.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkPolicy {
    /// Destinations the sandbox may open TCP connections to: host names,
    /// one-label wildcards, addresses and networks, each with an optional
    /// port. Everything else is dropped.
    pub allow: Vec<String>,
    /// Destinations refused even when `allow` admits them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

/// An IP network: an address and a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    fn bits(ip: IpAddr) -> (u128, u8) {
        match ip {
            IpAddr::V4(a) => (u32::from(a) as u128, 32),
            IpAddr::V6(a) => (u128::from(a), 128),
        }
    }

    pub fn host(addr: IpAddr) -> Cidr {
        Cidr {
            addr,
            prefix: Self::bits(addr).1,
        }
    }

    fn masked(v: u128, width: u8, prefix: u8) -> u128 {
        v.checked_shr((width - prefix) as u32).unwrap_or(0)
    }

    pub fn contains(&self, ip: IpAddr) -> bool {
        let (a, wa) = Self::bits(self.addr);
        let (b, wb) = Self::bits(ip);
        wa == wb && Self::masked(a, wa, self.prefix) == Self::masked(b, wb, self.prefix)
    }

    pub fn overlaps(&self, o: &Cidr) -> bool {
        let p = self.prefix.min(o.prefix);
        let (a, wa) = Self::bits(self.addr);
        let (b, wb) = Self::bits(o.addr);
        wa == wb && Self::masked(a, wa, p) == Self::masked(b, wb, p)
    }

    pub fn is_host(&self) -> bool {
        self.prefix == Self::bits(self.addr).1
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// One parsed `allow` or `deny` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// Exactly this host name (lower case, no trailing dot).
    Name { name: String, port: Option<u16> },
    /// Any name of one more label under `suffix` (stored without `*.`).
    Wildcard { suffix: String, port: Option<u16> },
    /// Any address in `net`.
    Net { net: Cidr, port: Option<u16> },
}

fn port_ok(p: &str) -> Result<u16, String> {
    match p.parse::<u16>() {
        Ok(0) | Err(_) => Err("the port must be a number from 1 to 65535".into()),
        Ok(n) => Ok(n),
    }
}

/// A valid DNS host name of at least two labels (LDH rule, at most 253
/// bytes, labels of 1 to 63), returned in lower case.
pub fn host_name(s: &str) -> Result<String, String> {
    let s = s.strip_suffix('.').unwrap_or(s).to_ascii_lowercase();
    if s.is_empty() || s.len() > 253 {
        return Err("not a valid host name (1 to 253 characters)".into());
    }
    let labels: Vec<&str> = s.split('.').collect();
    if labels.len() < 2 {
        return Err("a host name needs at least two labels (e.g. example.org)".into());
    }
    for l in &labels {
        let ok = !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-');
        if !ok {
            return Err(format!("not a valid host name: label {l:?}"));
        }
    }
    if labels.last().unwrap().bytes().all(|b| b.is_ascii_digit()) {
        return Err("not a valid host name or address".into());
    }
    Ok(s)
}

fn parse_net(s: &str) -> Result<Cidr, String> {
    let (a, p) = match s.split_once('/') {
        Some((a, p)) => (a, Some(p)),
        None => (s, None),
    };
    let addr: IpAddr = a.parse().map_err(|_| format!("{a:?} is not an address"))?;
    let width = Cidr::host(addr).prefix;
    let prefix = match p {
        None => width,
        Some(p) => match p.parse::<u8>() {
            Ok(n) if n <= width => n,
            _ => return Err(format!("the prefix length must be 0 to {width}")),
        },
    };
    let (bits, w) = Cidr::bits(addr);
    if prefix < w
        && bits
            & 1u128
                .checked_shl((w - prefix) as u32)
                .map_or(u128::MAX, |m| m - 1)
            != 0
    {
        return Err(format!("{s} has bits set past the /{prefix} prefix"));
    }
    if addr.is_unspecified() && prefix == w || addr.is_multicast() {
        return Err("must be a unicast address".into());
    }
    Ok(Cidr { addr, prefix })
}

impl Entry {
    /// Parse one entry (see the module doc for the syntax).
    pub fn parse(s: &str) -> Result<Entry, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("empty entry".into());
        }
        if let Some(rest) = s.strip_prefix('[') {
            let (a, tail) = rest
                .split_once(']')
                .ok_or("an IPv6 address in brackets needs a closing ']'")?;
            let net = parse_net(a)?;
            let port = match tail {
                "" => None,
                t => Some(port_ok(
                    t.strip_prefix(':').ok_or("expected :port after ']'")?,
                )?),
            };
            return Ok(Entry::Net { net, port });
        }
        if s.matches(':').count() > 1 {
            // Bare IPv6 (a network or address, no port).
            return Ok(Entry::Net {
                net: parse_net(s)?,
                port: None,
            });
        }
        let (host, port) = match s.rsplit_once(':') {
            Some((h, p)) => (h, Some(port_ok(p)?)),
            None => (s, None),
        };
        if let Some(suffix) = host.strip_prefix("*.") {
            if suffix.contains('*') {
                return Err("a wildcard may only be one leading '*.' label".into());
            }
            let suffix = host_name(suffix)?;
            return Ok(Entry::Wildcard { suffix, port });
        }
        if host.contains('*') {
            return Err(
                "a wildcard must be one leading label over at least two others (*.example.org)"
                    .into(),
            );
        }
        if host
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b'.' || b == b'/')
        {
            return Ok(Entry::Net {
                net: parse_net(host)?,
                port,
            });
        }
        Ok(Entry::Name {
            name: host_name(host)?,
            port,
        })
    }

    pub fn port(&self) -> Option<u16> {
        match self {
            Entry::Name { port, .. } | Entry::Wildcard { port, .. } | Entry::Net { port, .. } => {
                *port
            }
        }
    }

    /// Whether this entry admits `name` on `port`.
    pub fn matches_name(&self, name: &str, port: Option<u16>) -> bool {
        let port_ok = match (self.port(), port) {
            (None, _) | (_, None) => true,
            (Some(a), Some(b)) => a == b,
        };
        port_ok
            && match self {
                Entry::Name { name: n, .. } => n == name,
                Entry::Wildcard { suffix, .. } => wildcard_matches(suffix, name),
                Entry::Net { .. } => false,
            }
    }

    /// Whether this entry admits address `ip` on `port`.
    pub fn matches_addr(&self, ip: IpAddr, port: u16) -> bool {
        match self {
            Entry::Net { net, port: p } => p.is_none_or(|p| p == port) && net.contains(ip),
            _ => false,
        }
    }
}

/// `*.suffix` matches exactly one label in front of `suffix`.
pub fn wildcard_matches(suffix: &str, name: &str) -> bool {
    name.strip_suffix(suffix)
        .and_then(|h| h.strip_suffix('.'))
        .is_some_and(|label| !label.is_empty() && !label.contains('.'))
}

fn ports_meet(a: Option<u16>, b: Option<u16>) -> bool {
    match (a, b) {
        (Some(x), Some(y)) => x == y,
        _ => true,
    }
}

/// Whether deny entry `d` can take anything away from allow entry `a`.
fn can_narrow(d: &Entry, a: &Entry) -> bool {
    if !ports_meet(d.port(), a.port()) {
        return false;
    }
    match (d, a) {
        (Entry::Name { name, .. }, _) => a.matches_name(name, d.port()),
        (Entry::Wildcard { suffix: ds, .. }, Entry::Wildcard { suffix: s, .. }) => ds == s,
        (Entry::Wildcard { suffix, .. }, Entry::Name { name, .. }) => {
            wildcard_matches(suffix, name)
        }
        (Entry::Wildcard { .. }, Entry::Net { .. }) => false,
        (Entry::Net { net: dn, .. }, Entry::Net { net: an, .. }) => dn.overlaps(an),
        (Entry::Net { .. }, _) => true,
    }
}

impl NetworkPolicy {
    /// The parsed allowlist (entries that do not parse are skipped; see
    /// [`NetworkPolicy::validate`]).
    pub fn allow_entries(&self) -> Vec<Entry> {
        self.allow
            .iter()
            .filter_map(|a| Entry::parse(a).ok())
            .collect()
    }

    pub fn deny_entries(&self) -> Vec<Entry> {
        self.deny
            .iter()
            .filter_map(|a| Entry::parse(a).ok())
            .collect()
    }

    /// The `ip:port` entries of the allowlist (what a backend that forwards
    /// fixed destinations can serve).
    pub fn destinations(&self) -> Vec<std::net::SocketAddr> {
        self.allow.iter().filter_map(|a| a.parse().ok()).collect()
    }

    /// Check both lists; the error names the field (`network.allow[3]`).
    pub fn validate(&self) -> Result<(), Error> {
        for (list, what) in [(&self.allow, "network.allow"), (&self.deny, "network.deny")] {
            if list.len() > MAX_ENTRIES {
                return Err(bad(what, format!("at most {MAX_ENTRIES} entries")));
            }
        }
        let mut allow = Vec::with_capacity(self.allow.len());
        for (i, a) in self.allow.iter().enumerate() {
            allow.push(Entry::parse(a).map_err(|m| bad(&format!("network.allow[{i}]"), m))?);
        }
        for (i, d) in self.deny.iter().enumerate() {
            let field = format!("network.deny[{i}]");
            let e = Entry::parse(d).map_err(|m| bad(&field, m))?;
            if !allow.iter().any(|a| can_narrow(&e, a)) {
                return Err(bad(
                    &field,
                    "matches nothing the allow list admits (a deny entry only narrows network.allow)",
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Entry {
        Entry::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn entries_parse() {
        assert_eq!(
            p("PyPI.org"),
            Entry::Name {
                name: "pypi.org".into(),
                port: None
            }
        );
        assert_eq!(
            p("*.pythonhosted.org:443"),
            Entry::Wildcard {
                suffix: "pythonhosted.org".into(),
                port: Some(443)
            }
        );
        assert!(matches!(p("10.1.0.0/16"), Entry::Net { net, port: None } if net.prefix == 16));
        assert!(matches!(
            p("10.1.0.0/16:8080"),
            Entry::Net {
                port: Some(8080),
                ..
            }
        ));
        assert!(matches!(p("127.0.0.1:80"), Entry::Net { net, port: Some(80) } if net.is_host()));
        assert!(matches!(
            p("[::1]:443"),
            Entry::Net {
                port: Some(443),
                ..
            }
        ));
        assert!(matches!(p("2001:db8::/32"), Entry::Net { port: None, .. }));
        for bad in [
            "",
            "*",
            "*.com",
            "*.com:443",
            "a.*.b",
            "*x.org",
            "**.a.b",
            "com",
            "ex ample.org",
            "-a.org",
            "a-.org",
            "a..org",
            "a.org:0",
            "a.org:99999",
            "a.org:x",
            "1.2.3.4/33",
            "10.1.0.1/16",
            "1.2.3",
            "1.2.3.4.5",
            "0.0.0.0",
            "224.0.0.1",
            "[::1",
            "[::1]x",
            "[::1]:0",
            "1.2.3.4:80:1",
        ] {
            assert!(Entry::parse(bad).is_err(), "{bad:?} parsed");
        }
        let long = format!("{}.org", "a".repeat(64));
        assert!(Entry::parse(&long).is_err());
    }

    #[test]
    fn matching() {
        let w = p("*.pythonhosted.org");
        assert!(w.matches_name("files.pythonhosted.org", Some(443)));
        assert!(!w.matches_name("pythonhosted.org", Some(443)));
        assert!(!w.matches_name("a.b.pythonhosted.org", Some(443)));
        assert!(!w.matches_name("evilpythonhosted.org", Some(443)));
        let n = p("pypi.org:443");
        assert!(n.matches_name("pypi.org", Some(443)));
        assert!(!n.matches_name("pypi.org", Some(80)));
        let c = p("10.1.0.0/16:22");
        assert!(c.matches_addr("10.1.200.3".parse().unwrap(), 22));
        assert!(!c.matches_addr("10.2.0.1".parse().unwrap(), 22));
        assert!(!c.matches_addr("10.1.0.1".parse().unwrap(), 23));
        assert!(p("::/0").matches_addr("2001:db8::1".parse().unwrap(), 1));
        assert!(!p("::/0").matches_addr("1.2.3.4".parse().unwrap(), 1));
    }

    fn pol(allow: &[&str], deny: &[&str]) -> NetworkPolicy {
        NetworkPolicy {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            deny: deny.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn deny_must_narrow_allow() {
        let field = |p: NetworkPolicy| p.validate().unwrap_err().field.unwrap();
        assert!(pol(&["*.allowed.test"], &["bad.allowed.test"])
            .validate()
            .is_ok());
        assert!(pol(&["*.allowed.test"], &["*.allowed.test:80"])
            .validate()
            .is_ok());
        assert!(pol(&["pypi.org"], &["151.101.0.0/16"]).validate().is_ok());
        assert!(pol(&["10.0.0.0/8"], &["10.9.0.0/16"]).validate().is_ok());
        assert_eq!(field(pol(&["a.test"], &["b.test"])), "network.deny[0]");
        assert_eq!(
            field(pol(&["a.test:443"], &["a.test:80"])),
            "network.deny[0]"
        );
        assert_eq!(
            field(pol(&["10.0.0.0/8"], &["11.0.0.0/8"])),
            "network.deny[0]"
        );
        assert_eq!(field(pol(&["10.0.0.0/8"], &["x.test"])), "network.deny[0]");
        assert_eq!(field(pol(&[], &["x.test"])), "network.deny[0]");
        assert_eq!(field(pol(&["a.test", "*.com"], &[])), "network.allow[1]");
        assert_eq!(field(pol(&["a.test"], &["a.test", "*"])), "network.deny[1]");
        let many = vec!["a.test".to_string(); MAX_ENTRIES + 1];
        let e = NetworkPolicy {
            allow: many,
            deny: vec![],
        };
        assert_eq!(field(e), "network.allow");
    }
}
