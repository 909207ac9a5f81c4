//! Delivery: one task per endpoint walks the tenant's audit log from the
//! endpoint's cursor, POSTs each event it subscribes to and moves the
//! cursor on once the endpoint answered 2xx, or once the last retry failed
//! (the event becomes a dead letter). A crash between a delivery and the
//! cursor write delivers that event again: at least once, in order, with a
//! stable event id. In a cluster an endpoint is delivered by the node that
//! holds its claim (renewed while it works, taken over when it lapses).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, warn};

use stasis_core::now_ms;
use stasis_meta::webhooks::{DeadLetter, Webhook};

use super::{events, sign, Webhooks};

#[derive(Debug, Clone)]
pub struct DeliveryConfig {
    /// How often an idle endpoint looks for new events.
    pub poll: Duration,
    /// Attempts per event before it becomes a dead letter.
    pub attempts: u32,
    /// First retry delay; doubles each time, at most `backoff_max`.
    pub backoff: Duration,
    pub backoff_max: Duration,
    /// Per-request timeout.
    pub timeout: Duration,
}

impl Default for DeliveryConfig {
    fn default() -> Self {
        DeliveryConfig {
            poll: Duration::from_millis(250),
            attempts: 6,
            backoff: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            timeout: Duration::from_secs(10),
        }
    }
}

/// The delay before retry `n` (1-based).
pub fn backoff(cfg: &DeliveryConfig, n: u32) -> Duration {
    cfg.backoff
        .saturating_mul(1u32 << (n.saturating_sub(1)).min(16))
        .min(cfg.backoff_max)
}

/// How long a claim lasts; renewed well before.
const CLAIM: Duration = Duration::from_secs(30);

pub(super) fn spawn(
    w: Arc<Webhooks>,
    node: String,
    cfg: DeliveryConfig,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(cfg.timeout)
            .build()
            .expect("http client");
        let mut tasks: HashMap<String, tokio::task::JoinHandle<()>> = HashMap::new();
        loop {
            match w.meta.webhook_list(None).await {
                Ok(list) => {
                    tasks.retain(|_, t| !t.is_finished());
                    for hook in list {
                        if let std::collections::hash_map::Entry::Vacant(slot) =
                            tasks.entry(hook.id.clone())
                        {
                            let (w, http, node, cfg) =
                                (w.clone(), http.clone(), node.clone(), cfg.clone());
                            slot.insert(tokio::spawn(async move {
                                endpoint(w, http, node, cfg, hook.id).await
                            }));
                        }
                    }
                }
                Err(e) => warn!(error = %e, "webhooks: listing endpoints failed"),
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

/// Deliver one endpoint until it is deleted.
async fn endpoint(
    w: Arc<Webhooks>,
    http: reqwest::Client,
    node: String,
    cfg: DeliveryConfig,
    id: String,
) {
    // Until when this node holds the endpoint's claim: an idle endpoint
    // renews it only when half of it has passed, not at every poll (a
    // database write four times a second per endpoint otherwise).
    let mut held_until = 0i64;
    loop {
        let hook = match w.meta.webhook_get(&id).await {
            Ok(h) => h,
            Err(e) if e.code == stasis_core::ErrorCode::NotFound => return,
            Err(e) => {
                warn!(webhook = %id, error = %e, "webhooks: reading endpoint failed");
                tokio::time::sleep(cfg.poll * 4).await;
                continue;
            }
        };
        let claim_ms = CLAIM.as_millis() as i64;
        if now_ms() + claim_ms / 2 > held_until {
            let until = now_ms() + claim_ms;
            let claimed = w
                .meta
                .webhook_claim(&id, &node, until)
                .await
                .unwrap_or(false);
            if !claimed {
                held_until = 0;
                tokio::time::sleep(CLAIM / 3).await;
                continue;
            }
            held_until = until;
        }
        match round(&w, &http, &node, &cfg, &hook).await {
            Ok(0) => tokio::time::sleep(cfg.poll).await,
            Ok(_) => {}
            Err(e) => {
                warn!(webhook = %id, error = %e, "webhooks: delivery round failed");
                tokio::time::sleep(cfg.poll * 4).await;
            }
        }
    }
}

/// Handle the events after the endpoint's cursor; how many entries it saw.
async fn round(
    w: &Webhooks,
    http: &reqwest::Client,
    node: &str,
    cfg: &DeliveryConfig,
    hook: &Webhook,
) -> stasis_core::Result<usize> {
    let entries = w.meta.audit_after(&hook.tenant, hook.cursor, 100).await?;
    if entries.is_empty() {
        return Ok(0);
    }
    let secret = w.secret_of(hook)?;
    for e in &entries {
        let ty = match events::event_type(&e.action, &e.target) {
            Some(t) if events::wants(&hook.events, t) => t,
            _ => {
                w.meta.webhook_skip(&hook.id, e.seq).await?;
                continue;
            }
        };
        // Stop if the endpoint was deleted or claimed away meanwhile.
        if !w
            .meta
            .webhook_claim(&hook.id, node, now_ms() + CLAIM.as_millis() as i64)
            .await?
        {
            return Ok(entries.len());
        }
        let body = serde_json::to_vec(&events::payload(e, ty)).expect("json");
        let mut last_error = String::new();
        let mut ok = false;
        let mut tried = 0;
        for attempt in 1..=cfg.attempts {
            tried = attempt;
            if attempt > 1 {
                tokio::time::sleep(backoff(cfg, attempt - 1)).await;
            }
            match send(http, &hook.url, &secret, e.seq, ty, &body).await {
                Ok(()) => {
                    ok = true;
                    break;
                }
                Err(err) => {
                    debug!(webhook = %hook.id, seq = e.seq, attempt, error = %err, "webhook delivery failed");
                    last_error = err;
                }
            }
        }
        if !ok {
            warn!(webhook = %hook.id, seq = e.seq, error = %last_error, "webhook event dead-lettered");
            w.meta
                .webhook_dead_add(&DeadLetter {
                    webhook: hook.id.clone(),
                    seq: e.seq,
                    event_type: ty.into(),
                    payload: serde_json::from_slice(&body).expect("json"),
                    attempts: tried as i64,
                    last_error,
                    at_ms: now_ms(),
                })
                .await?;
        }
        w.meta.webhook_advance(&hook.id, e.seq, ok).await?;
    }
    Ok(entries.len())
}

/// One POST; Ok on any 2xx.
async fn send(
    http: &reqwest::Client,
    url: &str,
    secret: &[u8],
    seq: i64,
    ty: &str,
    body: &[u8],
) -> Result<(), String> {
    let t = now_ms() / 1000;
    let r = http
        .post(url)
        .header("content-type", "application/json")
        .header("stasis-event-id", format!("evt-{seq}"))
        .header("stasis-event-type", ty)
        .header(sign::HEADER, sign::sign(secret, t, body))
        .body(body.to_vec())
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if r.status().is_success() {
        Ok(())
    } else {
        Err(format!("answered {}", r.status()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let cfg = DeliveryConfig::default();
        assert_eq!(backoff(&cfg, 1), Duration::from_millis(500));
        assert_eq!(backoff(&cfg, 2), Duration::from_secs(1));
        assert_eq!(backoff(&cfg, 4), Duration::from_secs(4));
        assert_eq!(backoff(&cfg, 30), Duration::from_secs(30));
    }
}
