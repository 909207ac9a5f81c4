//! Who may mint, rotate and revoke which tokens.

use super::*;
use crate::auth::live_token;

struct Env {
    _dir: tempfile::TempDir,
    meta: Meta,
    a: TenantId,
    b: TenantId,
}

async fn env() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let meta = Meta::open(&dir.path().join("meta.db")).await.unwrap();
    let a = TenantId::parse("t-a").unwrap();
    let b = TenantId::parse("t-b").unwrap();
    meta.create_tenant(&a, "a").await.unwrap();
    meta.create_tenant(&b, "b").await.unwrap();
    Env {
        _dir: dir,
        meta,
        a,
        b,
    }
}

fn admin() -> Identity {
    Identity {
        token_id: "tok-admin".into(),
        tenant: None,
        is_admin: true,
        actor: "api".into(),
        scopes: Scopes::all(),
        sandbox: None,
        expires_at_ms: None,
    }
}

/// The identity a freshly minted token authenticates as.
async fn as_caller(meta: &Meta, t: &NewToken) -> Identity {
    let rec = live_token(meta, &t.token).await.unwrap();
    Identity {
        scopes: Scopes::from_stored(rec.scopes.as_deref()),
        sandbox: rec.sandbox,
        expires_at_ms: rec.expires_at_ms,
        token_id: rec.id,
        tenant: rec.tenant,
        is_admin: rec.is_admin,
        actor: "api".into(),
    }
}

fn req(scopes: &[&str], ttl: Option<u64>) -> TokenRequest {
    TokenRequest {
        name: "t".into(),
        scopes: Some(scopes.iter().map(|s| s.to_string()).collect()),
        ttl_secs: ttl,
        sandbox: None,
    }
}

fn code<T: std::fmt::Debug>(r: Result<T>) -> ErrorCode {
    r.expect_err("must fail").code
}

#[tokio::test]
async fn a_tenant_mints_only_narrower_tokens_of_its_own() {
    let e = env().await;
    let full = create(
        &e.meta,
        &admin(),
        &e.a,
        &TokenRequest {
            name: "full".into(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(full.scopes, None, "an admin's default: every scope");
    let owner = as_caller(&e.meta, &full).await;
    let approver = create(&e.meta, &owner, &e.a, &req(&["approve"], Some(3600)))
        .await
        .unwrap();
    assert_eq!(
        approver.scopes.as_deref(),
        Some(&["approve".to_string()][..])
    );
    assert!(approver.expires_at_ms.unwrap() > now_ms());
    let approver = as_caller(&e.meta, &approver).await;
    // The approver cannot mint (no manage), nor grant what it lacks.
    assert_eq!(
        code(create(&e.meta, &approver, &e.a, &req(&["approve"], None)).await),
        ErrorCode::Forbidden
    );
    let manager = as_caller(
        &e.meta,
        &create(&e.meta, &owner, &e.a, &req(&["manage"], Some(600)))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        code(create(&e.meta, &manager, &e.a, &req(&["exec"], None)).await),
        ErrorCode::Forbidden
    );
    // What it mints never outlives it.
    let child = create(&e.meta, &manager, &e.a, &req(&["manage"], Some(86_400)))
        .await
        .unwrap();
    assert_eq!(child.expires_at_ms, manager.expires_at_ms);
    let child = create(
        &e.meta,
        &manager,
        &e.a,
        &TokenRequest {
            name: "c".into(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(child.expires_at_ms, manager.expires_at_ms);
    assert_eq!(
        child.scopes.as_deref(),
        Some(&["manage".to_string()][..]),
        "default: the caller's scopes"
    );
    // Another tenant does not exist for it.
    assert_eq!(
        code(create(&e.meta, &owner, &e.b, &req(&["read"], None)).await),
        ErrorCode::NotFound
    );
    assert_eq!(code(list(&e.meta, &owner, &e.b).await), ErrorCode::NotFound);
}

#[tokio::test]
async fn bad_requests_name_their_field() {
    let e = env().await;
    for (r, field) in [
        (req(&["root"], None), "scopes"),
        (req(&[], None), "scopes"),
        (req(&["read"], Some(59)), "ttl_secs"),
        (req(&["read"], Some(MAX_TTL_SECS + 1)), "ttl_secs"),
        (
            TokenRequest {
                name: "".into(),
                ..Default::default()
            },
            "name",
        ),
        (
            TokenRequest {
                name: "x".into(),
                sandbox: Some("../x".into()),
                ..Default::default()
            },
            "sandbox",
        ),
    ] {
        let err = create(&e.meta, &admin(), &e.a, &r).await.unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidArgument, "{err}");
        assert_eq!(err.field.as_deref(), Some(field), "{err}");
    }
    // A sandbox the tenant does not have.
    let r = TokenRequest {
        name: "x".into(),
        sandbox: Some("sbx-nope".into()),
        ..Default::default()
    };
    assert_eq!(
        code(create(&e.meta, &admin(), &e.a, &r).await),
        ErrorCode::NotFound
    );
}

#[tokio::test]
async fn rotation_keeps_both_valid_for_the_overlap_then_only_the_new() {
    let e = env().await;
    let old = create(&e.meta, &admin(), &e.a, &req(&["exec"], None))
        .await
        .unwrap();
    let owner = as_caller(
        &e.meta,
        &create(
            &e.meta,
            &admin(),
            &e.a,
            &TokenRequest {
                name: "o".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap(),
    )
    .await;
    let new = rotate(
        &e.meta,
        &owner,
        &old.id,
        &RotateRequest {
            overlap_secs: Some(3600),
        },
    )
    .await
    .unwrap();
    assert_eq!(new.rotated_from.as_deref(), Some(old.id.as_str()));
    assert_eq!(new.scopes, old.scopes);
    assert_eq!(new.name, old.name);
    // Both work during the overlap.
    live_token(&e.meta, &old.token).await.unwrap();
    live_token(&e.meta, &new.token).await.unwrap();
    let until = e
        .meta
        .get_token(&old.id)
        .await
        .unwrap()
        .expires_at_ms
        .unwrap();
    assert!(until > now_ms() + 3_500_000 && until <= now_ms() + 3_600_000);
    // Overlap 0 ends the old one at once.
    let newer = rotate(
        &e.meta,
        &owner,
        &new.id,
        &RotateRequest {
            overlap_secs: Some(0),
        },
    )
    .await
    .unwrap();
    let err = live_token(&e.meta, &new.token).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::Unauthorized);
    assert!(err.message.contains("expired"), "{err}");
    live_token(&e.meta, &newer.token).await.unwrap();
    // An expired or revoked token is not rotated; bounds are checked.
    assert_eq!(
        code(rotate(&e.meta, &owner, &new.id, &RotateRequest::default()).await),
        ErrorCode::InvalidState
    );
    let err = rotate(
        &e.meta,
        &owner,
        &newer.id,
        &RotateRequest {
            overlap_secs: Some(MAX_OVERLAP_SECS + 1),
        },
    )
    .await
    .unwrap_err();
    assert_eq!(err.field.as_deref(), Some("overlap_secs"));
}

#[tokio::test]
async fn a_tenant_touches_only_its_own_tokens_and_never_escalates() {
    let e = env().await;
    let a_owner = as_caller(
        &e.meta,
        &create(
            &e.meta,
            &admin(),
            &e.a,
            &TokenRequest {
                name: "o".into(),
                ..Default::default()
            },
        )
        .await
        .unwrap(),
    )
    .await;
    let b_tok = create(&e.meta, &admin(), &e.b, &req(&["read"], None))
        .await
        .unwrap();
    assert_eq!(
        code(revoke(&e.meta, &a_owner, &b_tok.id).await),
        ErrorCode::NotFound
    );
    assert_eq!(
        code(rotate(&e.meta, &a_owner, &b_tok.id, &RotateRequest::default()).await),
        ErrorCode::NotFound
    );
    assert_eq!(
        code(revoke(&e.meta, &a_owner, "tok-admin").await),
        ErrorCode::NotFound
    );
    // Not itself (that is what rotation is for).
    assert_eq!(
        code(revoke(&e.meta, &a_owner, &a_owner.token_id).await),
        ErrorCode::InvalidArgument
    );
    // A manage-only token cannot rotate a full one into its own hands.
    let manager = as_caller(
        &e.meta,
        &create(&e.meta, &a_owner, &e.a, &req(&["manage"], None))
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        code(
            rotate(
                &e.meta,
                &manager,
                &a_owner.token_id,
                &RotateRequest::default()
            )
            .await
        ),
        ErrorCode::Forbidden
    );
    // It can revoke a token of its tenant, once.
    let x = create(&e.meta, &a_owner, &e.a, &req(&["read"], None))
        .await
        .unwrap();
    revoke(&e.meta, &manager, &x.id).await.unwrap();
    assert_eq!(
        code(revoke(&e.meta, &manager, &x.id).await),
        ErrorCode::InvalidState
    );
    assert_eq!(
        code(live_token(&e.meta, &x.token).await),
        ErrorCode::Unauthorized
    );
    // Everything above is in the audit log, by token.
    let log = e.meta.audit_list(Some(&e.a), None, 100).await.unwrap();
    let actions: Vec<&str> = log.iter().map(|x| x.action.as_str()).collect();
    assert!(
        actions.contains(&"token_create") && actions.contains(&"token_revoke"),
        "{actions:?}"
    );
}

#[tokio::test]
async fn a_rotation_never_outlives_the_caller() {
    let e = env().await;
    // A never-expiring token, and a 1-hour manage token of the same tenant.
    let forever = create(&e.meta, &admin(), &e.a, &req(&["manage"], None))
        .await
        .unwrap();
    assert_eq!(forever.expires_at_ms, None);
    let hour = as_caller(
        &e.meta,
        &create(&e.meta, &admin(), &e.a, &req(&["manage"], Some(3600)))
            .await
            .unwrap(),
    )
    .await;
    let own = hour.expires_at_ms.expect("the caller expires");
    let new = rotate(&e.meta, &hour, &forever.id, &RotateRequest::default())
        .await
        .unwrap();
    assert_eq!(
        new.expires_at_ms,
        Some(own),
        "capped at the caller's expiry"
    );
    let stored = e.meta.get_token(&new.id).await.unwrap();
    assert_eq!(stored.expires_at_ms, Some(own));
    // An old expiry earlier than the caller's is kept; an admin's rotation
    // keeps the old one's (none).
    let short = create(&e.meta, &admin(), &e.a, &req(&["manage"], Some(600)))
        .await
        .unwrap();
    let new = rotate(&e.meta, &hour, &short.id, &RotateRequest::default())
        .await
        .unwrap();
    assert_eq!(new.expires_at_ms, short.expires_at_ms);
    let other = create(&e.meta, &admin(), &e.a, &req(&["read"], None))
        .await
        .unwrap();
    let new = rotate(&e.meta, &admin(), &other.id, &RotateRequest::default())
        .await
        .unwrap();
    assert_eq!(new.expires_at_ms, None);
}
