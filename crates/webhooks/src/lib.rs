//! Signed lifecycle webhooks.
//!
//! A tenant registers endpoints (`POST /v1/webhooks`); the daemon then POSTs
//! a JSON event to each for what happens to the tenant's sandboxes,
//! snapshots and approvals ([`events`]), signed with the endpoint's own
//! secret ([`sign`]), to URLs the operator allows ([`policy`]). Events come
//! from the audit log in order and are delivered at least once: retried with
//! backoff, and after the last attempt kept as a dead letter (listed by the
//! API) while delivery moves on ([`deliver`]). Delivery runs beside the
//! daemon's work and never blocks a lifecycle operation.

pub mod deliver;
pub mod events;
pub mod policy;
pub mod sign;

use std::sync::Arc;

use base64::Engine;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use stasis_core::{Error, Result, TenantId};
use stasis_meta::webhooks::{DeadLetter, Webhook};
use stasis_meta::{Meta, NewAuditEntry};
use stasis_store::Store;

pub use deliver::DeliveryConfig;
pub use policy::WebhookPolicy;

/// Endpoints per tenant at most.
pub const MAX_PER_TENANT: usize = 20;

#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateWebhook {
    /// Where events are POSTed (a host the operator allows).
    pub url: String,
    /// Event types (see the docs), or `["*"]` (the default) for all.
    #[serde(default)]
    pub events: Option<Vec<String>>,
}

/// An endpoint as listed (never its secret).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct WebhookInfo {
    pub id: String,
    pub url: String,
    pub events: Vec<String>,
    pub created_at_ms: i64,
    /// Events delivered and dead-lettered so far.
    pub delivered: i64,
    pub failed: i64,
}

/// An endpoint as returned once, at creation, with its signing secret.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct NewWebhook {
    #[serde(flatten)]
    pub info: WebhookInfo,
    /// HMAC-SHA256 key of the `Stasis-Signature` header. Shown only here.
    pub secret: String,
}

fn info(w: Webhook) -> WebhookInfo {
    WebhookInfo {
        id: w.id,
        url: w.url,
        events: w.events,
        created_at_ms: w.created_at_ms,
        delivered: w.delivered,
        failed: w.failed,
    }
}

/// The name a webhook's secret is sealed under (bound to the tenant too).
pub fn secret_name(id: &str) -> String {
    format!("webhook:{id}")
}

/// The webhook service of one daemon: the operator's policy and the
/// endpoints' API; [`Webhooks::spawn`] starts delivery.
pub struct Webhooks {
    meta: Meta,
    store: Store,
    policy: WebhookPolicy,
}

impl Webhooks {
    pub fn new(meta: Meta, store: Store, policy: WebhookPolicy) -> Arc<Self> {
        Arc::new(Webhooks {
            meta,
            store,
            policy,
        })
    }

    async fn audit(
        &self,
        tenant: &TenantId,
        actor: &str,
        action: &str,
        target: &str,
        detail: serde_json::Value,
    ) {
        let e = NewAuditEntry {
            tenant: tenant.clone(),
            actor: actor.into(),
            action: action.into(),
            target: target.into(),
            detail,
        };
        if let Err(e) = self.meta.audit(e).await {
            tracing::warn!(error = %e, action, "audit append failed");
        }
    }

    pub async fn create(
        &self,
        tenant: &TenantId,
        actor: &str,
        req: &CreateWebhook,
    ) -> Result<NewWebhook> {
        let url = self.policy.check(&req.url)?;
        let events = match &req.events {
            None => vec!["*".to_string()],
            Some(v) if v.is_empty() => {
                return Err(Error::invalid("events: at least one event type, or \"*\"")
                    .with_field("events"))
            }
            Some(v) => {
                for e in v {
                    if e != "*" && !events::EVENT_TYPES.contains(&e.as_str()) {
                        return Err(Error::invalid(format!(
                            "unknown event type {e:?} (known: {})",
                            events::EVENT_TYPES.join(", ")
                        ))
                        .with_field("events"));
                    }
                }
                v.clone()
            }
        };
        if self.meta.webhook_list(Some(tenant)).await?.len() >= MAX_PER_TENANT {
            return Err(Error::state(format!(
                "at most {MAX_PER_TENANT} webhooks per tenant"
            )));
        }
        let mut b = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut b);
        let secret = format!(
            "whsec_{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b)
        );
        let mut idb = [0u8; 12];
        rand::rngs::OsRng.fill_bytes(&mut idb);
        let id = format!("wh-{}", hex::encode(idb));
        let sealed = self
            .store
            .seal_secret(tenant, &secret_name(&id), secret.as_bytes());
        let w = self
            .meta
            .webhook_create(&id, tenant, url.as_str(), &events, &sealed)
            .await?;
        self.audit(
            tenant,
            actor,
            "webhook_create",
            &id,
            serde_json::json!({"url": w.url, "events": w.events}),
        )
        .await;
        Ok(NewWebhook {
            info: info(w),
            secret,
        })
    }

    /// The endpoint `id` of `tenant` (another tenant's is not found).
    async fn own(&self, tenant: &TenantId, id: &str) -> Result<Webhook> {
        stasis_core::id::validate_id("webhook", id)?;
        match self.meta.webhook_get(id).await {
            Ok(w) if w.tenant == tenant.as_str() => Ok(w),
            Ok(_) => Err(Error::not_found(format!("webhook {id}"))),
            Err(e) => Err(e),
        }
    }

    pub async fn list(&self, tenant: &TenantId) -> Result<Vec<WebhookInfo>> {
        Ok(self
            .meta
            .webhook_list(Some(tenant))
            .await?
            .into_iter()
            .map(info)
            .collect())
    }

    pub async fn delete(&self, tenant: &TenantId, actor: &str, id: &str) -> Result<()> {
        let w = self.own(tenant, id).await?;
        self.meta.webhook_delete(&w.id).await?;
        self.audit(
            tenant,
            actor,
            "webhook_delete",
            id,
            serde_json::json!({"url": w.url}),
        )
        .await;
        Ok(())
    }

    pub async fn dead_letters(&self, tenant: &TenantId, id: &str) -> Result<Vec<DeadLetter>> {
        let w = self.own(tenant, id).await?;
        self.meta.webhook_dead_list(&w.id).await
    }

    /// The signing secret of an endpoint (for delivery).
    fn secret_of(&self, w: &Webhook) -> Result<Vec<u8>> {
        let tenant = TenantId::parse(&w.tenant)?;
        self.store
            .open_secret(&tenant, &secret_name(&w.id), &w.secret_sealed)
    }

    /// Start delivering (one task per endpoint, watched by a supervisor);
    /// `node` names this daemon in the endpoints' claims.
    pub fn spawn(
        self: &Arc<Self>,
        node: String,
        cfg: DeliveryConfig,
    ) -> tokio::task::JoinHandle<()> {
        deliver::spawn(self.clone(), node, cfg)
    }
}

#[cfg(test)]
mod tests;
