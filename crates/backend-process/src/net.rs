//! The process backend's side of egress (`network.allow` / `network.deny`).
//!
//! Every sandbox has its own network namespace (made with its PID 1). Once
//! PID 1 runs, the namespace is handed to the daemon's egress service
//! ([`stasis_backend::Egress::attach`]), which sets up loopback, a route, a
//! firewall inside the namespace and the sandbox's resolver and proxy; the
//! service decides every connection by name or address (see the
//! `stasis-net` crate). Nothing is added to the host's network: no veth, no
//! host nftables table. Without an egress service (`ProcessConfig::egress`
//! = None) the namespace keeps loopback only, and a manifest that allows
//! anything is refused.
//!
//! The sandbox cannot change any of this: it has no CAP_NET_ADMIN over the
//! namespace, and seccomp refuses setns/unshare.

use std::process::{Command, Stdio};

use stasis_core::{Error, Manifest, Result, SandboxId};

use crate::sandbox::ProcessBackend;
use crate::sys::blocking;

/// What this backend can serve: the same rules as every backend's
/// ([`stasis_backend::check_network`]).
pub fn check(m: &Manifest, has_egress: bool) -> Result<()> {
    stasis_backend::check_network(m, has_egress)
}

/// Hand the namespace of `init_pid` to the egress service under the
/// manifest's policy (again after a resume or a daemon restart: the
/// service replaces an earlier attachment).
pub(crate) async fn attach(
    be: &ProcessBackend,
    id: &SandboxId,
    init_pid: i32,
    m: &Manifest,
) -> Result<()> {
    let Some(eg) = be.cfg.egress.clone() else {
        return Ok(());
    };
    let (id, policy) = (id.clone(), m.network.clone());
    blocking(move || {
        let ns = stasis_backend::netns::open(init_pid as u32)?;
        eg.attach(&id, &ns, &policy)
            .map_err(|e| std::io::Error::other(e.message))
    })
    .await
    .map_err(|e| Error::backend(format!("sandbox network: {}", e.message)))
}

pub(crate) fn detach(be: &ProcessBackend, id: &SandboxId) {
    if let Some(eg) = &be.cfg.egress {
        eg.detach(id);
    }
}

/// Remove host nftables tables and veths an earlier version of this backend
/// made for sandboxes (`stasis_<tag>_*`, `stx*`); this version makes none.
pub fn cleanup_legacy(cgroup_parent: &str) {
    let mut h: u64 = 0xcbf29ce484222325;
    for b in cgroup_parent.bytes().chain([0u8]) {
        h ^= b as u64;
        h = h.wrapping_mul(0x100000001b3);
    }
    let prefix = format!("stasis_{:08x}_", h as u32);
    let Ok(out) = Command::new("nft")
        .args(["list", "tables", "inet"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
    else {
        return;
    };
    for t in String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("table inet "))
        .filter(|t| t.starts_with(&prefix))
    {
        let _ = Command::new("nft")
            .args(["delete", "table", "inet", t])
            .status();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checks() {
        let mut m = Manifest::default();
        m.network.allow = vec!["127.0.0.1:80".into(), "pypi.org".into()];
        assert!(check(&m, true).is_ok());
        let e = check(&m, false).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("network.allow"));
        m.network.allow = vec!["a.test".into(), "[::1]:80".into()];
        let e = check(&m, true).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("network.allow[1]"));
        assert!(check(&Manifest::default(), false).is_ok());
    }
}
