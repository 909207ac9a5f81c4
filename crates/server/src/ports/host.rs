//! Host routing of exposed ports: each port of each sandbox on an origin of
//! its own, `<port>-<sandbox>.<domain>` (as E2B and Daytona do), so nothing a
//! sandbox serves is ever same-origin with the daemon's console or API.
//!
//! The operator points a wildcard DNS name (`*.<domain>`) and, for HTTPS, a
//! wildcard certificate at the daemon (or at the TLS proxy before it) and
//! gives `--ports-domain [https://]<domain>[:port]`. This module only parses
//! and forms such hosts; it knows nothing of sandboxes beyond the label, so
//! another edge (an E2B-compatible one) can route its own ids the same way.

use stasis_core::{Error, Result};

/// The domain exposed ports are served under, and how their URLs are formed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortsDomain {
    /// `http` or `https` (what clients reach the domain with).
    scheme: String,
    /// Lowercase, no trailing dot, no port.
    domain: String,
    /// The port in URLs, when not the scheme's default.
    port: Option<u16>,
}

/// A port host's parts: `<port>-<label>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostRoute<'a> {
    pub port: u16,
    /// What follows the port: the sandbox's id, as the router knows it.
    pub label: &'a str,
}

fn bad(given: &str, why: &str) -> Error {
    Error::invalid(format!("--ports-domain {given:?}: {why}")).with_field("ports_domain")
}

/// A DNS name: dot-separated labels of letters, digits and hyphens.
fn is_dns_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// `host[:port]` with the port, if any, split off (IPv6 literals are not
/// port hosts: they never match).
fn split_port(host: &str) -> (&str, Option<&str>) {
    match host.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h, Some(p)),
        _ => (host, None),
    }
}

impl PortsDomain {
    /// `[http://|https://]domain[:port]`.
    pub fn parse(given: &str) -> Result<Self> {
        let s = given.trim();
        let (scheme, rest) = match s.split_once("://") {
            Some((sc, rest)) if sc.eq_ignore_ascii_case("http") => ("http", rest),
            Some((sc, rest)) if sc.eq_ignore_ascii_case("https") => ("https", rest),
            Some(_) => return Err(bad(given, "the scheme must be http or https")),
            None => ("http", s),
        };
        let rest = rest.trim_end_matches('/');
        let (host, port) = split_port(rest);
        let port = match port {
            Some(p) => Some(
                p.parse::<u16>()
                    .ok()
                    .filter(|p| *p > 0)
                    .ok_or_else(|| bad(given, "the port must be 1-65535"))?,
            ),
            None => None,
        };
        let domain = host.trim_end_matches('.').to_ascii_lowercase();
        if !is_dns_name(&domain) {
            return Err(bad(
                given,
                "not a DNS name (letters, digits, hyphens, dots)",
            ));
        }
        Ok(PortsDomain {
            scheme: scheme.to_string(),
            domain,
            port,
        })
    }

    /// The domain itself (lowercase, no port).
    pub fn name(&self) -> &str {
        &self.domain
    }

    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The port host a request's `Host` names, if it is one under this
    /// domain (any port: a TLS proxy in front may have changed it).
    pub fn route<'a>(&self, host: &'a str) -> Option<HostRoute<'a>> {
        let (host, _) = split_port(host.trim());
        let host = host.strip_suffix('.').unwrap_or(host);
        let cut = host.len().checked_sub(self.domain.len() + 1)?;
        if !host.is_char_boundary(cut) {
            return None;
        }
        let (first, dot_domain) = host.split_at(cut);
        let domain = dot_domain.strip_prefix('.')?;
        if !domain.eq_ignore_ascii_case(&self.domain) || first.contains('.') {
            return None;
        }
        let (port, label) = first.split_once('-')?;
        if port.is_empty() || port.len() > 5 || !port.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let port = port.parse::<u16>().ok().filter(|p| *p > 0)?;
        if label.is_empty() {
            return None;
        }
        Some(HostRoute { port, label })
    }

    /// The origin of `port` of the sandbox labelled `label`.
    pub fn origin(&self, port: u16, label: &str) -> String {
        let p = self.port.map(|p| format!(":{p}")).unwrap_or_default();
        format!("{}://{port}-{label}.{}{p}", self.scheme, self.domain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn domains_parse_with_scheme_and_port() {
        let d = PortsDomain::parse("ports.Example.com").unwrap();
        assert_eq!(d.origin(8000, "sb-1"), "http://8000-sb-1.ports.example.com");
        let d = PortsDomain::parse("https://ports.example.com:8443/").unwrap();
        assert_eq!(d.scheme(), "https");
        assert_eq!(
            d.origin(80, "sb-1"),
            "https://80-sb-1.ports.example.com:8443"
        );
        for bad in [
            "",
            "ftp://x.example",
            "x..example",
            "-x.example",
            "x.example:0",
            "x.example:99999",
            "x_y.example",
            "[::1]",
        ] {
            let e = PortsDomain::parse(bad).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("ports_domain"), "{bad}");
        }
    }

    #[test]
    fn hosts_route_to_a_port_and_a_label() {
        let d = PortsDomain::parse("ports.localhost:7070").unwrap();
        let r = d.route("8000-sb-0123abcd.ports.localhost:7070").unwrap();
        assert_eq!((r.port, r.label), (8000, "sb-0123abcd"));
        // Case and a trailing dot do not matter; the Host's port does not either.
        let r = d.route("65535-sb-x.PORTS.localhost.").unwrap();
        assert_eq!((r.port, r.label), (65535, "sb-x"));
        assert!(d.route("8000-sb-x.ports.localhost:1").is_some());
        for not in [
            "ports.localhost",
            "localhost:7070",
            "127.0.0.1:7070",
            "8000-sb-x.other.localhost",
            "8000-sb-x.xports.localhost",
            "a.8000-sb-x.ports.localhost",
            "8000.ports.localhost",
            "0-sb-x.ports.localhost",
            "70000-sb-x.ports.localhost",
            "x-sb-x.ports.localhost",
            "8000-.ports.localhost",
            "[::1]:7070",
            "",
        ] {
            assert_eq!(d.route(not), None, "{not}");
        }
    }
}
