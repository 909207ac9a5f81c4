//! Runtime network policy changes in the manager (fake backend: nothing is
//! attached, so a change is stored for the next attach).

use std::sync::Arc;

use super::harness::*;
use stasis_control::manager::Ctx;
use stasis_core::manifest::NetworkPolicy;
use stasis_core::{ErrorCode, TenantId};

fn pol(allow: &[&str], deny: &[&str]) -> NetworkPolicy {
    NetworkPolicy {
        allow: allow.iter().map(|s| s.to_string()).collect(),
        deny: deny.iter().map(|s| s.to_string()).collect(),
    }
}

#[tokio::test]
async fn network_policy_is_validated_stored_and_audited() {
    let env = Env::process();
    let m = env.manager().await;
    let rec = running(&m).await;
    let id = rec.id.clone();

    // Without an egress service a process sandbox cannot be given any.
    let e = m
        .set_network(&ctx(), &id, pol(&["pypi.org"], &[]))
        .await
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("network.allow"), "{e}");

    // Names are resolved when a policy is set: through an upstream on
    // loopback that answers nothing (the names stay unknown, accepted).
    m.set_egress(Arc::new(
        stasis_net::EgressService::new(stasis_net::EgressConfig {
            upstream: Some("127.0.0.1:9".parse().unwrap()),
            ..Default::default()
        })
        .unwrap(),
    ));
    let want = pol(
        &["pypi.org", "*.pythonhosted.org"],
        &["evil.pythonhosted.org"],
    );
    let s = m.set_network(&ctx(), &id, want.clone()).await.unwrap();
    assert_eq!(s.policy, want);
    assert!(!s.attached && s.counters.is_none());
    let r = record(&m, &id).await;
    assert_eq!(r.manifest.network, want);
    assert_ne!(r.manifest_digest, rec.manifest_digest);
    assert_eq!(m.network(&ctx(), &id).await.unwrap().policy, want);

    // Bad policies change nothing and name the field.
    for (p, field) in [
        (pol(&["*.com"], &[]), "network.allow[0]"),
        (pol(&["pypi.org"], &["x.test"]), "network.deny[0]"),
        (pol(&["[::1]:80"], &[]), "network.allow[0]"),
        (
            pol(&["pypi.org", "127.0.0.1:7070"], &[]),
            "network.allow[1]",
        ),
        (pol(&["10.0.0.0/8"], &[]), "network.allow[0]"),
    ] {
        let e = m.set_network(&ctx(), &id, p).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidManifest, "{e}");
        assert_eq!(e.field.as_deref(), Some(field), "{e}");
    }
    assert_eq!(record(&m, &id).await.manifest.network, want);

    // Another tenant sees no such sandbox.
    let other = Ctx {
        tenant: TenantId::parse("t-other").unwrap(),
        actor: "x".into(),
    };
    let e = m.set_network(&other, &id, pol(&[], &[])).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::NotFound);

    // Paused: stored, kept through the resume.
    m.pause(&ctx(), &id, None).await.unwrap();
    m.set_network(&ctx(), &id, pol(&["a.test"], &[]))
        .await
        .unwrap();
    m.resume(&ctx(), &id).await.unwrap();
    assert_eq!(
        record(&m, &id).await.manifest.network,
        pol(&["a.test"], &[])
    );

    let audit = m
        .meta()
        .audit_list(Some(&ctx().tenant), Some(id.as_str()), 100)
        .await
        .unwrap();
    let sets = audit.iter().filter(|e| e.action == "network.set").count();
    let refused = audit.iter().filter(|e| e.action == "refused").count();
    assert_eq!(sets, 2, "{audit:?}");
    assert!(refused >= 4, "{audit:?}");

    // Destroyed: refused.
    m.destroy(&ctx(), &id).await.unwrap();
    assert!(m.set_network(&ctx(), &id, pol(&[], &[])).await.is_err());
}

#[tokio::test]
async fn a_microvm_gets_the_same_network_checks() {
    let env = Env::new(stasis_core::BackendKind::Microvm);
    let m = env.manager().await;
    let rec = running(&m).await;
    // Names are resolved when a policy is set: through an upstream on
    // loopback that answers nothing (the names stay unknown, accepted).
    m.set_egress(Arc::new(
        stasis_net::EgressService::new(stasis_net::EgressConfig {
            upstream: Some("127.0.0.1:9".parse().unwrap()),
            ..Default::default()
        })
        .unwrap(),
    ));
    // IPv6 would reach nothing through a microVM's IPv4 user networking.
    for p in [pol(&["[::1]:80"], &[]), pol(&["2001:db8::/32"], &[])] {
        let e = m.set_network(&ctx(), &rec.id, p).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidManifest, "{e}");
        assert_eq!(e.field.as_deref(), Some("network.allow[0]"), "{e}");
    }
    assert_eq!(
        record(&m, &rec.id).await.manifest.network,
        rec.manifest.network
    );
    m.set_network(&ctx(), &rec.id, pol(&["pypi.org"], &[]))
        .await
        .unwrap();
}
