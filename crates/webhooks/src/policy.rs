//! Which endpoint URLs the operator allows (`--webhook-allow`).
//!
//! Webhooks make the daemon send requests on a tenant's behalf, so where
//! they may go is the operator's decision: entries are `host` or
//! `host:port`, a host may be `*.example.com` (any subdomain); nothing is
//! allowed by default. URLs are `http` or `https` only, without user info;
//! redirects are never followed (a redirect could lead anywhere).

use reqwest::Url;

use stasis_core::{Error, ErrorCode, Result};

#[derive(Debug, Clone, Default)]
pub struct WebhookPolicy {
    allow: Vec<(String, Option<u16>)>,
}

impl WebhookPolicy {
    /// Parse the operator's entries (an error names the bad one).
    pub fn new(entries: &[String]) -> Result<WebhookPolicy> {
        let mut allow = Vec::new();
        for e in entries {
            let bad = || {
                Error::invalid(format!(
                    "--webhook-allow {e:?}: expected host, host:port or *.domain[:port]"
                ))
            };
            let (host, port) = match e.rsplit_once(':') {
                Some((h, p)) if !h.contains(']') || h.ends_with(']') => {
                    (h.to_string(), Some(p.parse::<u16>().map_err(|_| bad())?))
                }
                _ => (e.clone(), None),
            };
            let bare = host.strip_prefix("*.").unwrap_or(&host);
            if bare.is_empty() || bare.contains('*') || bare.contains('/') {
                return Err(bad());
            }
            allow.push((host.to_ascii_lowercase(), port));
        }
        Ok(WebhookPolicy { allow })
    }

    /// The URL, checked: 400 naming `url` when malformed, 403 when the
    /// operator does not allow its host.
    pub fn check(&self, url: &str) -> Result<Url> {
        let bad = |why: &str| Error::invalid(format!("url {url:?}: {why}")).with_field("url");
        if url.len() > 2048 {
            return Err(bad("longer than 2048 characters"));
        }
        let u = Url::parse(url).map_err(|e| bad(&e.to_string()))?;
        if !matches!(u.scheme(), "http" | "https") {
            return Err(bad("only http and https"));
        }
        if !u.username().is_empty() || u.password().is_some() {
            return Err(bad("no user info in webhook URLs"));
        }
        let host = u
            .host_str()
            .ok_or_else(|| bad("no host"))?
            .to_ascii_lowercase();
        let port = u.port_or_known_default();
        let ok = self.allow.iter().any(|(h, p)| {
            let host_ok = match h.strip_prefix("*.") {
                Some(dom) => host.ends_with(&format!(".{dom}")),
                None => *h == host,
            };
            host_ok && p.is_none_or(|p| Some(p) == port)
        });
        if !ok {
            return Err(Error::new(
                ErrorCode::Forbidden,
                format!("the operator does not allow webhooks to {host} (--webhook-allow)"),
            )
            .with_field("url"));
        }
        Ok(u)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_listed_hosts_and_ports() {
        let p = WebhookPolicy::new(&[
            "127.0.0.1".into(),
            "hooks.example.com:443".into(),
            "*.acme.test".into(),
        ])
        .unwrap();
        p.check("http://127.0.0.1:8080/h").unwrap();
        p.check("https://hooks.example.com/x").unwrap();
        p.check("https://a.b.acme.test/x").unwrap();
        for (u, code) in [
            ("http://hooks.example.com/x", ErrorCode::Forbidden),
            ("https://evil.test/x", ErrorCode::Forbidden),
            ("https://acme.test/x", ErrorCode::Forbidden),
            ("http://127.0.0.2/", ErrorCode::Forbidden),
            ("ftp://127.0.0.1/", ErrorCode::InvalidArgument),
            ("http://u:p@127.0.0.1/", ErrorCode::InvalidArgument),
            ("not a url", ErrorCode::InvalidArgument),
        ] {
            let e = p.check(u).unwrap_err();
            assert_eq!(
                (e.code, e.field.as_deref()),
                (code, Some("url")),
                "{u}: {e}"
            );
        }
        assert_eq!(
            WebhookPolicy::default()
                .check("http://127.0.0.1/")
                .unwrap_err()
                .code,
            ErrorCode::Forbidden
        );
        for bad in ["", "*.", "a/b", "h:port", "*.*.x"] {
            assert!(WebhookPolicy::new(&[bad.into()]).is_err(), "{bad}");
        }
    }
}
