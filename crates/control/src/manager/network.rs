//! A sandbox's network policy at runtime: read it with the egress counters,
//! or replace it (owner only). A new policy is validated as the manifest is
//! and, entry by entry, against what the egress service never reaches (the
//! host, link-local, private ranges the operator has not opened), applied live to a running sandbox through the egress service, persisted
//! into the stored manifest (so a paused sandbox gets it at resume, and a
//! snapshot taken later carries it) and audited.

use std::sync::Arc;

use serde::Serialize;
use stasis_core::manifest::NetworkPolicy;
use stasis_core::{Error, Result, SandboxId, SandboxState};
use stasis_net::{CounterValues, EgressService};

use super::{Ctx, Manager};

/// The policy in force and, while the sandbox is attached, its counters.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct NetworkStatus {
    /// `allow` and `deny` as stored in the sandbox's manifest.
    #[schema(value_type = Object)]
    pub policy: NetworkPolicy,
    /// Whether the sandbox is attached to this daemon's egress service now
    /// (running here); a paused sandbox gets the policy at resume.
    pub attached: bool,
    /// Counters since the sandbox was last attached.
    pub counters: Option<EgressCounters>,
}

#[derive(Debug, Clone, Copy, Serialize, utoipa::ToSchema)]
pub struct EgressCounters {
    pub allowed: u64,
    pub denied: u64,
    pub dns_queries: u64,
    pub dns_refused: u64,
    pub dns_limited: u64,
    pub upstream_queries: u64,
}

impl From<CounterValues> for EgressCounters {
    fn from(c: CounterValues) -> Self {
        EgressCounters {
            allowed: c.allowed,
            denied: c.denied,
            dns_queries: c.dns_queries,
            dns_refused: c.dns_refused,
            dns_limited: c.dns_limited,
            upstream_queries: c.upstream_queries,
        }
    }
}

impl Manager {
    /// Give the manager the daemon's egress service (before serving).
    pub fn set_egress(&self, e: Arc<EgressService>) {
        let _ = self.egress.set(e);
    }

    pub fn egress(&self) -> Option<&Arc<EgressService>> {
        self.egress.get()
    }

    fn status(&self, id: &SandboxId, policy: NetworkPolicy) -> NetworkStatus {
        let counters = self.egress().and_then(|e| e.counters(id));
        NetworkStatus {
            policy,
            attached: counters.is_some(),
            counters: counters.map(Into::into),
        }
    }

    pub async fn network(&self, ctx: &Ctx, id: &SandboxId) -> Result<NetworkStatus> {
        let rec = self.meta.get_for(&ctx.tenant, id).await?;
        Ok(self.status(id, rec.manifest.network))
    }

    /// Replace the sandbox's network policy (both lists).
    pub async fn set_network(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        policy: NetworkPolicy,
    ) -> Result<NetworkStatus> {
        let r = self.do_set_network(ctx, id, policy).await;
        if let Err(e) = &r {
            self.audit_refusal(ctx, "network.set", id.as_str(), e).await;
        }
        r
    }

    async fn do_set_network(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        policy: NetworkPolicy,
    ) -> Result<NetworkStatus> {
        // The manifest's rules, and (with an egress service) every allow
        // entry against what egress never reaches.
        match self.egress() {
            Some(e) => e.check(&policy).await?,
            None => policy.validate()?,
        }
        let (_guard, rec) = self.exclusive(ctx, id).await?;
        if rec.state == SandboxState::Destroyed {
            return Err(Error::state(format!("sandbox {id} is destroyed")));
        }
        let mut manifest = rec.manifest.clone();
        manifest.network = policy.clone();
        manifest.validate()?;
        stasis_backend::check_network(&manifest, self.egress().is_some())?;
        // Live first: a policy the egress service refuses is not stored.
        let live = self.egress().filter(|e| e.is_attached(id));
        if let Some(e) = live {
            e.update(id, &policy)?;
        }
        if let Err(err) = self.meta.set_manifest(id, &manifest).await {
            if let Some(e) = live {
                let _ = e.update(id, &rec.manifest.network);
            }
            return Err(err);
        }
        self.audit(
            ctx,
            "network.set",
            id.as_str(),
            serde_json::json!({"allow": policy.allow, "deny": policy.deny, "live": live.is_some()}),
        )
        .await;
        Ok(self.status(id, policy))
    }
}
