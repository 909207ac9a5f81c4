//! Deciding one destination: a tenant's allow and deny lists under the
//! operator's deny list.
//!
//! Names (from DNS questions, SNI and Host) are admitted when an allow entry
//! matches and no deny entry (tenant's or operator's) does. Addresses are
//! judged twice: a destination the sandbox dialled by address must be
//! allowed by a network entry; the real address the proxy is about to dial
//! (for names too) must not be in a denied network nor refused by the
//! operator's [`Guard`] (the host, loopback, link-local, private ranges...),
//! so deny wins whatever the name resolved to.

use std::net::IpAddr;
use std::sync::Arc;

use stasis_core::manifest::network::Entry;
use stasis_core::manifest::NetworkPolicy;
use stasis_core::{Error, ErrorCode, Result};

use crate::guard::{Guard, Why};

/// Why a destination was refused (kept in logs and counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No allow entry matches.
    NotAllowed,
    /// The tenant's deny list matches.
    Denied,
    /// The operator's deny list matches.
    OperatorDenied,
    /// The operator's guard refuses the address (see [`crate::guard`]).
    Guarded(Why),
}

/// What the operator decides for every sandbox: the deny list and the
/// guard.
#[derive(Debug, Clone)]
pub struct Operator {
    pub deny: Vec<Entry>,
    pub guard: Guard,
}

impl Operator {
    /// No deny list; the guard with private ranges closed and nothing
    /// exposed (the daemon's defaults).
    pub fn open() -> Operator {
        Operator {
            deny: Vec::new(),
            guard: Guard::new(false, Vec::new(), Vec::new()),
        }
    }
}

/// A sandbox's policy, parsed, with the operator's side beside it.
#[derive(Debug, Clone)]
pub struct Policy {
    allow: Vec<Entry>,
    deny: Vec<Entry>,
    operator: Arc<Operator>,
}

/// Parse the operator's deny list (`--egress-deny`), naming a bad entry.
pub fn operator_list(entries: &[String]) -> Result<Vec<Entry>> {
    entries
        .iter()
        .map(|e| {
            Entry::parse(e).map_err(|m| {
                Error::new(
                    ErrorCode::InvalidArgument,
                    format!("egress deny entry {e:?}: {m}"),
                )
            })
        })
        .collect()
}

impl Policy {
    /// The manifest's policy (validated here as the manifest is) under
    /// `operator`.
    pub fn new(p: &NetworkPolicy, operator: Arc<Operator>) -> Result<Policy> {
        p.validate()?;
        Ok(Policy {
            allow: p.allow_entries(),
            deny: p.deny_entries(),
            operator,
        })
    }

    /// Nothing allowed: the sandbox has loopback only.
    pub fn is_empty(&self) -> bool {
        self.allow.is_empty()
    }

    /// Whether `name` may be resolved (port unknown) or reached on `port`.
    pub fn name(&self, name: &str, port: Option<u16>) -> std::result::Result<(), Refusal> {
        let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
        // A deny entry with a port only refuses that port; when the port is
        // not known yet (a DNS question) only port-less entries refuse.
        let denies = |e: &Entry| match (e.port(), port) {
            (Some(_), None) => false,
            _ => e.matches_name(&name, port),
        };
        if self.operator.deny.iter().any(denies) {
            return Err(Refusal::OperatorDenied);
        }
        if self.deny.iter().any(denies) {
            return Err(Refusal::Denied);
        }
        if self.allow.iter().any(|e| e.matches_name(&name, port)) {
            Ok(())
        } else {
            Err(Refusal::NotAllowed)
        }
    }

    /// Whether the proxy may dial the real address `ip:port` (the deny
    /// lists and the guard; the allow decision was made on the name or
    /// address the sandbox asked for).
    pub fn real_addr(&self, ip: IpAddr, port: u16) -> std::result::Result<(), Refusal> {
        if let Some(why) = self.operator.guard.refusal(ip, Some(port)) {
            return Err(Refusal::Guarded(why));
        }
        if self.operator.deny.iter().any(|e| e.matches_addr(ip, port)) {
            return Err(Refusal::OperatorDenied);
        }
        if self.deny.iter().any(|e| e.matches_addr(ip, port)) {
            return Err(Refusal::Denied);
        }
        Ok(())
    }

    /// Whether the sandbox may dial `ip:port` by address.
    pub fn addr(&self, ip: IpAddr, port: u16) -> std::result::Result<(), Refusal> {
        self.real_addr(ip, port)?;
        if self.allow.iter().any(|e| e.matches_addr(ip, port)) {
            Ok(())
        } else {
            Err(Refusal::NotAllowed)
        }
    }

    /// The allowed loopback destinations `127.x.y.z:P` the operator exposes
    /// (`--egress-expose`): the host's loopback port P, which the firewall
    /// must send to the proxy rather than leave on the sandbox's own `lo`.
    pub fn loopback_ports(&self) -> Vec<(std::net::Ipv4Addr, u16)> {
        let mut v = Vec::new();
        for e in &self.allow {
            if let Entry::Net { net, port: Some(p) } = e {
                if let (IpAddr::V4(a), true) = (net.addr, net.is_host()) {
                    if a.is_loopback()
                        && self.real_addr(net.addr, *p).is_ok()
                        && !v.contains(&(a, *p))
                    {
                        v.push((a, *p));
                    }
                }
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy_with(allow: &[&str], deny: &[&str], op: &[&str], expose: &[&str]) -> Policy {
        let p = NetworkPolicy {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            deny: deny.iter().map(|s| s.to_string()).collect(),
        };
        let op: Vec<String> = op.iter().map(|s| s.to_string()).collect();
        let expose = expose.iter().map(|e| Entry::parse(e).unwrap()).collect();
        let operator = Operator {
            deny: operator_list(&op).unwrap(),
            guard: Guard::new(false, expose, vec!["127.0.0.1:7070".parse().unwrap()])
                .with_local(|| Some(vec![])),
        };
        Policy::new(&p, Arc::new(operator)).unwrap()
    }

    fn policy(allow: &[&str], deny: &[&str], op: &[&str]) -> Policy {
        policy_with(allow, deny, op, &[])
    }

    #[test]
    fn names_deny_wins() {
        let p = policy(
            &["*.allowed.test", "pypi.org:443"],
            &["bad.allowed.test", "*.allowed.test:80"],
            &["evil.allowed.test"],
        );
        assert_eq!(p.name("x.allowed.test", None), Ok(()));
        assert_eq!(p.name("X.Allowed.Test.", Some(443)), Ok(()));
        assert_eq!(p.name("x.allowed.test", Some(80)), Err(Refusal::Denied));
        assert_eq!(p.name("bad.allowed.test", None), Err(Refusal::Denied));
        assert_eq!(
            p.name("evil.allowed.test", Some(443)),
            Err(Refusal::OperatorDenied)
        );
        assert_eq!(p.name("allowed.test", None), Err(Refusal::NotAllowed));
        assert_eq!(p.name("a.b.allowed.test", None), Err(Refusal::NotAllowed));
        assert_eq!(p.name("pypi.org", None), Ok(()));
        assert_eq!(p.name("pypi.org", Some(80)), Err(Refusal::NotAllowed));
    }

    #[test]
    fn addresses() {
        let p = policy_with(
            &[
                "10.0.0.0/8:22",
                "127.0.0.1:8080",
                "a.test",
                "0.0.0.0/0:7070",
            ],
            &["10.9.0.0/16"],
            &["93.184.216.0/24"],
            &["127.0.0.1:8080", "10.0.0.0/8"],
        );
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(p.addr(ip("10.1.2.3"), 22), Ok(()));
        assert_eq!(p.addr(ip("10.1.2.3"), 23), Err(Refusal::NotAllowed));
        assert_eq!(p.addr(ip("10.9.2.3"), 22), Err(Refusal::Denied));
        assert_eq!(p.real_addr(ip("10.9.2.3"), 443), Err(Refusal::Denied));
        assert_eq!(
            p.real_addr(ip("93.184.216.34"), 443),
            Err(Refusal::OperatorDenied)
        );
        assert_eq!(
            p.real_addr(ip("169.254.169.254"), 80),
            Err(Refusal::Guarded(Why::Range(crate::guard::Range::LinkLocal)))
        );
        assert_eq!(p.real_addr(ip("93.184.217.34"), 443), Ok(()));
        // A wide entry never matches what the guard refuses: not the
        // daemon, not loopback.
        assert_eq!(p.addr(ip("93.184.217.34"), 7070), Ok(()));
        assert_eq!(
            p.addr(ip("127.0.0.1"), 7070),
            Err(Refusal::Guarded(Why::Daemon))
        );
        assert_eq!(
            p.addr(ip("127.0.0.2"), 7070),
            Err(Refusal::Guarded(Why::Range(crate::guard::Range::Loopback)))
        );
        assert_eq!(
            p.loopback_ports(),
            vec![("127.0.0.1".parse().unwrap(), 8080)]
        );
        // Loopback the operator does not expose is not redirected.
        let q = policy(&["127.0.0.1:8080"], &[], &[]);
        assert_eq!(q.loopback_ports(), vec![]);
        assert_eq!(
            q.addr(ip("127.0.0.1"), 8080),
            Err(Refusal::Guarded(Why::Range(crate::guard::Range::Loopback)))
        );
        assert!(operator_list(&["*.com".into()]).is_err());
    }
}
