//! A tenant's allow entries against the operator's [`Guard`], when a
//! policy is set (at create and at a runtime change): refused with a 400
//! that names the entry (`invalid_manifest`, field `network.allow[i]`).
//!
//! - An address or network entry is judged by [`Guard::check_entry`].
//! - A name is resolved as the proxy would resolve it (the operator's hosts
//!   view, else the upstream) and refused when any of its addresses is
//!   refused. A name that does not resolve now is accepted: the proxy
//!   checks the real address again at every connection, so a name that
//!   later points at the host (DNS rebinding) still reaches nothing.
//! - A wildcard cannot be resolved ahead; the connect-time check holds it.
//!
//! Deny entries are not judged: denying more never opens anything.

use std::net::IpAddr;
use std::sync::Arc;

use stasis_core::manifest::network::Entry;
use stasis_core::manifest::NetworkPolicy;
use stasis_core::{Error, ErrorCode, Result};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

use crate::guard::Guard;
use crate::upstream::Upstream;

/// Names resolved at once while a policy is checked.
const PARALLEL: usize = 16;

fn refused(i: usize, entry: &str, why: &str) -> Error {
    let field = format!("network.allow[{i}]");
    Error::new(
        ErrorCode::InvalidManifest,
        format!("{field}: {entry:?}: {why}"),
    )
    .with_field(&field)
}

/// Check `p` (the manifest's rules first) under `guard`, resolving names
/// through `upstream`.
pub async fn check(p: &NetworkPolicy, guard: &Guard, upstream: &Arc<Upstream>) -> Result<()> {
    p.validate()?;
    let mut first: Option<(usize, String)> = None;
    let mut keep = |i: usize, why: String| {
        if first.as_ref().is_none_or(|(j, _)| i < *j) {
            first = Some((i, why));
        }
    };
    let gate = Arc::new(Semaphore::new(PARALLEL));
    let mut names = JoinSet::new();
    for (i, a) in p.allow.iter().enumerate() {
        match Entry::parse(a) {
            Ok(Entry::Name { name, port }) => {
                let (up, gate) = (upstream.clone(), gate.clone());
                names.spawn(async move {
                    let _permit = gate.acquire_owned().await;
                    let addrs = match up.from_hosts(&name) {
                        Some(v) => v,
                        None => up.query(&name).await.unwrap_or_default(),
                    };
                    (i, port, addrs)
                });
            }
            Ok(e) => {
                if let Err(why) = guard.check_entry(&e) {
                    keep(i, why);
                }
            }
            Err(m) => keep(i, m),
        }
    }
    while let Some(r) = names.join_next().await {
        let Ok((i, port, addrs)) = r else { continue };
        for a in addrs {
            if let Some(why) = guard.refusal(IpAddr::V4(a), port) {
                keep(
                    i,
                    format!("resolves to {a}, {why}; egress never reaches it"),
                );
                break;
            }
        }
    }
    match first {
        Some((i, why)) => Err(refused(i, &p.allow[i], &why)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pol(allow: &[&str]) -> NetworkPolicy {
        NetworkPolicy {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            deny: vec![],
        }
    }

    #[tokio::test]
    async fn entries_naming_or_resolving_into_refused_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let hosts = dir.path().join("hosts");
        std::fs::write(
            &hosts,
            "127.0.0.1 daemon.test\n10.1.2.3 private.test\n93.184.216.34 public.test\n",
        )
        .unwrap();
        // An upstream that never answers: names outside the view are
        // unknown now, and accepted.
        let up =
            Arc::new(Upstream::new(Some(&hosts), Some("127.0.0.1:9".parse().unwrap())).unwrap());
        let g = Guard::new(false, vec![], vec!["127.0.0.1:7070".parse().unwrap()])
            .with_local(|| Some(vec![]));
        let field = |e: Error| (e.code, e.field.unwrap(), e.message);
        for (allow, at, says) in [
            (
                vec!["public.test", "daemon.test:7070"],
                1,
                "127.0.0.1, the daemon",
            ),
            (vec!["daemon.test"], 0, "resolves to 127.0.0.1"),
            (vec!["public.test", "private.test"], 1, "private network"),
            (vec!["a.test", "127.0.0.1:7070"], 1, "daemon"),
            (vec!["10.0.0.0/8", "daemon.test"], 0, "inside 10.0.0.0/8"),
            (vec!["0.0.0.0/0", "169.254.169.254:80"], 1, "link-local"),
        ] {
            let (code, f, msg) = field(check(&pol(&allow), &g, &up).await.unwrap_err());
            assert_eq!(code, ErrorCode::InvalidManifest, "{allow:?}");
            assert_eq!(f, format!("network.allow[{at}]"), "{allow:?}: {msg}");
            assert!(msg.contains(says), "{allow:?}: {msg}");
            assert!(msg.contains(&format!("{:?}", allow[at])), "{msg}");
        }
        for ok in [
            vec![
                "public.test:443",
                "*.daemon.test",
                "unknown.test",
                "0.0.0.0/0",
            ],
            vec!["93.184.216.0/24:80"],
        ] {
            assert!(check(&pol(&ok), &g, &up).await.is_ok(), "{ok:?}");
        }
        // The manifest's own rules still come first.
        let e = check(&pol(&["*.com"]), &g, &up).await.unwrap_err();
        assert_eq!(e.field.as_deref(), Some("network.allow[0]"));
        // With private ranges open, the private name passes; loopback not.
        let p = Guard::new(true, vec![], vec![]).with_local(|| Some(vec![]));
        assert!(check(&pol(&["private.test", "10.0.0.0/8"]), &p, &up)
            .await
            .is_ok());
        assert!(check(&pol(&["daemon.test"]), &p, &up).await.is_err());
    }
}
