//! Who calls the E2B edge.
//!
//! **API keys.** The E2B SDKs refuse a key that is not `e2b_` followed by
//! hex digits, so a stasis token travels hex-encoded: `E2B_API_KEY` is
//! `e2b_` + the hex of the token's text (`stk_...`). A bare `stk_` token in
//! `X-API-Key` (an SDK with key validation turned off) and
//! `Authorization: Bearer stk_...` (the SDKs' access-token option) are
//! accepted too. The token is then the caller exactly as on `/v1`: same
//! tenant, scopes, expiry and revocation.
//!
//! **envd access tokens.** The control plane answers every create and
//! connect with an `envdAccessToken`, which the SDKs send on every envd call
//! as `X-Access-Token`. It is `<token id>.<hex HMAC-SHA256>` over the token
//! id, the tenant and the sandbox id under a daemon key shared by every
//! node ([`crate::state::ENVD_KEY`]): it opens one sandbox only, and it dies
//! with the API token that created it (the token is looked up live on every
//! use, so revoking or expiring it closes the sandbox's data plane too).

use axum::http::HeaderMap;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use stasis_access::auth::{live_token, unauthorized, Identity, TOKEN_PREFIX};
use stasis_access::scope::Scopes;
use stasis_core::{Result, TenantId};
use stasis_meta::Meta;

/// The actor recorded in the audit log for E2B calls.
pub const ACTOR: &str = "e2b";

/// The stasis token an `X-API-Key` value carries, if it carries one.
pub fn token_of_api_key(key: &str) -> Option<String> {
    let key = key.trim();
    if key.starts_with(TOKEN_PREFIX) {
        return Some(key.to_string());
    }
    let hexed = key.strip_prefix("e2b_")?;
    let bytes = hex::decode(hexed).ok()?;
    let text = String::from_utf8(bytes).ok()?;
    text.starts_with(TOKEN_PREFIX).then_some(text)
}

/// The `E2B_API_KEY` that carries a stasis token.
pub fn api_key_of_token(token: &str) -> String {
    format!("e2b_{}", hex::encode(token.as_bytes()))
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The caller of a control-plane request (401 on anything but a live token).
pub async fn api_identity(meta: &Meta, headers: &HeaderMap) -> Result<Identity> {
    let token = if let Some(key) = header(headers, "x-api-key") {
        token_of_api_key(key).ok_or_else(|| {
            unauthorized(
                "invalid API key: expected e2b_ followed by the hex of a stasis token (stk_...)",
            )
        })?
    } else if let Some(v) = header(headers, "authorization") {
        match v.split_once(' ') {
            Some((scheme, t)) if scheme.eq_ignore_ascii_case("bearer") => t.trim().to_string(),
            _ => return Err(unauthorized("malformed Authorization header")),
        }
    } else {
        return Err(unauthorized(
            "missing API key: set E2B_API_KEY (see the E2B chapter of the manual)",
        ));
    };
    if !token.starts_with(TOKEN_PREFIX) || token.len() > 128 {
        return Err(unauthorized("invalid or revoked token"));
    }
    let rec = live_token(meta, &token).await?;
    Ok(identity(rec))
}

fn identity(rec: stasis_meta::TokenRecord) -> Identity {
    Identity {
        scopes: Scopes::from_stored(rec.scopes.as_deref()),
        sandbox: rec.sandbox,
        expires_at_ms: rec.expires_at_ms,
        token_id: rec.id,
        tenant: rec.tenant,
        is_admin: rec.is_admin,
        actor: ACTOR.to_string(),
    }
}

fn mac(key: &[u8; 32], token_id: &str, tenant: &TenantId, sandbox: &str) -> Hmac<Sha256> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    for part in [token_id, tenant.as_str(), sandbox] {
        m.update(&(part.len() as u64).to_be_bytes());
        m.update(part.as_bytes());
    }
    m
}

/// The envd access token of `sandbox` for the caller `who`.
pub fn envd_token(key: &[u8; 32], who: &Identity, tenant: &TenantId, sandbox: &str) -> String {
    let tag = mac(key, &who.token_id, tenant, sandbox)
        .finalize()
        .into_bytes();
    format!("{}.{}", who.token_id, hex::encode(tag))
}

/// The caller of an envd request on `sandbox`: the `X-Access-Token` must be
/// this sandbox's, and the API token behind it still live. 401 otherwise
/// (the same answer for a wrong sandbox, a forged tag and a revoked token).
pub async fn envd_identity(
    meta: &Meta,
    key: &[u8; 32],
    headers: &HeaderMap,
    sandbox: &str,
) -> Result<Identity> {
    let bad = || unauthorized("invalid access token for this sandbox");
    let given = header(headers, "x-access-token").ok_or_else(|| {
        unauthorized("missing X-Access-Token (the envdAccessToken of the sandbox)")
    })?;
    let (token_id, tag) = given.trim().split_once('.').ok_or_else(bad)?;
    let tag = hex::decode(tag).map_err(|_| bad())?;
    let rec = match meta.get_token(token_id).await {
        Ok(rec) => rec,
        Err(_) => return Err(bad()),
    };
    if rec.revoked_at_ms.is_some() {
        return Err(bad());
    }
    if rec.expired(stasis_core::now_ms()) {
        return Err(unauthorized("token expired"));
    }
    let tenant = rec.tenant.clone().ok_or_else(bad)?;
    mac(key, token_id, &tenant, sandbox)
        .verify_slice(&tag)
        .map_err(|_| bad())?;
    Ok(identity(rec))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_keys_carry_tokens_hex_encoded() {
        let token = "stk_AbC-_09xyz";
        let key = api_key_of_token(token);
        assert!(key.starts_with("e2b_"));
        assert!(key[4..].bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(token_of_api_key(&key).as_deref(), Some(token));
        assert_eq!(token_of_api_key(token).as_deref(), Some(token));
        // Hex of something that is not a stasis token, bad hex, other shapes.
        assert_eq!(
            token_of_api_key(&format!("e2b_{}", hex::encode("abc"))),
            None
        );
        assert_eq!(token_of_api_key("e2b_zz"), None);
        assert_eq!(token_of_api_key("e2b_"), None);
        assert_eq!(token_of_api_key("sk-xyz"), None);
    }

    async fn meta_with_token() -> (tempfile::TempDir, Meta, Identity, String) {
        let dir = tempfile::tempdir().unwrap();
        let meta = Meta::open(&dir.path().join("meta.db")).await.unwrap();
        let tenant = TenantId::parse("acme").unwrap();
        meta.create_tenant(&tenant, "acme").await.unwrap();
        let token = stasis_access::auth::generate_token();
        meta.insert_token(&stasis_meta::tenants::NewTokenRecord {
            id: &stasis_access::auth::generate_token_id(),
            tenant: Some(&tenant),
            name: "t",
            hash: &stasis_meta::hash_token(&token),
            is_admin: false,
            scopes: None,
            expires_at_ms: None,
            sandbox: None,
            rotated_from: None,
        })
        .await
        .unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("x-api-key", api_key_of_token(&token).parse().unwrap());
        let who = api_identity(&meta, &headers).await.unwrap();
        (dir, meta, who, token)
    }

    #[tokio::test]
    async fn envd_tokens_open_one_sandbox_and_die_with_their_api_token() {
        let (_dir, meta, who, _token) = meta_with_token().await;
        let tenant = who.tenant.clone().unwrap();
        let key = [7u8; 32];
        let t = envd_token(&key, &who, &tenant, "sb-1");
        let mut h = HeaderMap::new();
        h.insert("x-access-token", t.parse().unwrap());
        let got = envd_identity(&meta, &key, &h, "sb-1").await.unwrap();
        assert_eq!(got.token_id, who.token_id);
        // Another sandbox, another key, a flipped tag, no header: refused.
        assert!(envd_identity(&meta, &key, &h, "sb-2").await.is_err());
        assert!(envd_identity(&meta, &[8u8; 32], &h, "sb-1").await.is_err());
        let mut flipped = t.clone();
        let last = flipped.pop().unwrap();
        flipped.push(if last == '0' { '1' } else { '0' });
        let mut hf = HeaderMap::new();
        hf.insert("x-access-token", flipped.parse().unwrap());
        assert!(envd_identity(&meta, &key, &hf, "sb-1").await.is_err());
        assert!(envd_identity(&meta, &key, &HeaderMap::new(), "sb-1")
            .await
            .is_err());
        // Revoking the API token closes the data plane.
        meta.revoke_token(&who.token_id).await.unwrap();
        assert!(envd_identity(&meta, &key, &h, "sb-1").await.is_err());
    }

    #[tokio::test]
    async fn api_identity_refuses_missing_malformed_and_unknown_keys() {
        let (_dir, meta, _who, token) = meta_with_token().await;
        let mut h = HeaderMap::new();
        assert!(api_identity(&meta, &h).await.is_err());
        h.insert("x-api-key", "e2b_00ff".parse().unwrap());
        assert!(api_identity(&meta, &h).await.is_err());
        let other = stasis_access::auth::generate_token();
        h.insert("x-api-key", api_key_of_token(&other).parse().unwrap());
        assert!(api_identity(&meta, &h).await.is_err());
        let mut b = HeaderMap::new();
        b.insert("authorization", format!("Bearer {token}").parse().unwrap());
        assert!(api_identity(&meta, &b).await.is_ok());
    }
}
