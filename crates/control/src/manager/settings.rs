//! What the owner changes on a sandbox besides its state: its lifecycle
//! policy at runtime (idle window, TTLs, lifetime; audited as
//! `lifecycle.set`), its labels at create, and listing by filter and page.
//! Reads never change the policy; only this call does.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use stasis_core::{Error, LifecyclePolicy, OnIdle, Result, SandboxId, SandboxState};
use stasis_meta::{Labels, ListFilter, SandboxRecord};

use super::{Ctx, Manager};

/// A change of a sandbox's lifecycle policy: the fields given replace the
/// policy's; the others stay.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct LifecycleChange {
    /// Seconds without API activity before `on_idle` applies (1 to 30 days).
    #[serde(default)]
    pub idle_timeout_secs: Option<u64>,
    /// `pause`, `pause_filesystem`, `destroy` or `nothing`.
    #[serde(default)]
    #[schema(value_type = Option<String>)]
    pub on_idle: Option<OnIdle>,
    /// A paused sandbox is destroyed this long after it was paused; a paused
    /// sandbox's expiry moves with it.
    #[serde(default)]
    pub paused_ttl_secs: Option<u64>,
    /// Running time after which the sandbox is destroyed; 0 = no limit.
    #[serde(default)]
    pub max_lifetime_secs: Option<u64>,
    /// The sandbox is destroyed after this many more seconds of running time
    /// from now (E2B's `set_timeout`): sets `max_lifetime_secs` to the running
    /// time so far plus this. Not together with `max_lifetime_secs`.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
}

impl LifecycleChange {
    /// The policy after this change, for a sandbox that has run `running_ms`.
    pub fn apply(&self, old: &LifecyclePolicy, running_ms: i64) -> Result<LifecyclePolicy> {
        if *self == LifecycleChange::default() {
            return Err(Error::invalid(
                "give at least one of idle_timeout_secs, on_idle, paused_ttl_secs, max_lifetime_secs, timeout_secs",
            ));
        }
        if self.timeout_secs.is_some() && self.max_lifetime_secs.is_some() {
            return Err(Error::invalid(
                "timeout_secs and max_lifetime_secs set the same limit: give one",
            )
            .with_field("timeout_secs"));
        }
        if self.timeout_secs == Some(0) {
            return Err(
                Error::invalid("timeout_secs must be at least 1").with_field("timeout_secs")
            );
        }
        let mut p = old.clone();
        if let Some(v) = self.idle_timeout_secs {
            p.idle_timeout_secs = v;
        }
        if let Some(v) = self.on_idle {
            p.on_idle = v;
        }
        if let Some(v) = self.paused_ttl_secs {
            p.paused_ttl_secs = v;
        }
        if let Some(v) = self.max_lifetime_secs {
            p.max_lifetime_secs = v;
        }
        if let Some(t) = self.timeout_secs {
            // Whole seconds run so far, rounded down: the limit is kept in seconds,
            // and a deadline up to a second early is what E2B's callers expect
            // (a sandbox asked to stop in 5 s is gone when they look at 6 s); one
            // rounded up could land a second late, past their check.
            let ran = running_ms.max(0) as u64 / 1000;
            p.max_lifetime_secs = ran.saturating_add(t);
        }
        // The manifest's own rules, reported as this request's fields.
        let m = stasis_core::Manifest {
            lifecycle: p.clone(),
            ..Default::default()
        };
        m.validate().map_err(|e| {
            let field = e
                .field
                .as_deref()
                .map(|f| f.trim_start_matches("lifecycle.").to_string());
            let mut out = Error::invalid(e.message);
            out.field = field;
            out
        })?;
        Ok(p)
    }
}

/// The policy after E2B's "timeout" of `secs` on a sandbox that has run
/// `running_ms` (see [`Manager::set_timeout`]).
pub fn timeout_policy(
    old: &LifecyclePolicy,
    running_ms: i64,
    secs: u64,
    extend_only: bool,
) -> LifecyclePolicy {
    let mut p = old.clone();
    // Whole seconds run so far, rounded down: the limit is kept in seconds,
    // and a deadline up to a second early is what E2B's callers expect
    // (a sandbox asked to stop in 5 s is gone when they look at 6 s); one
    // rounded up could land a second late, past their check.
    let ran = running_ms.max(0) as u64 / 1000;
    let limit = ran.saturating_add(secs);
    let keep = extend_only && (old.max_lifetime_secs == 0 || old.max_lifetime_secs >= limit);
    if !keep {
        p.max_lifetime_secs = limit.max(1);
    }
    if old.on_lifetime.pause().is_some() && secs > 0 {
        p.renew_secs = secs;
    }
    p
}

impl Manager {
    /// Change the lifecycle policy of the caller's sandbox (not a destroyed
    /// one), audited as `lifecycle.set` with the policy before and after.
    pub async fn set_lifecycle(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        change: &LifecycleChange,
    ) -> Result<SandboxRecord> {
        let detail = serde_json::json!({"change": change});
        self.update_lifecycle(ctx, id, detail, |old, ran| change.apply(old, ran))
            .await
    }

    /// Give the caller's sandbox `secs` more seconds of running time from
    /// now (E2B's timeout; 0: its limit is reached now): `max_lifetime_secs`
    /// becomes the running time so far plus `secs`. With `extend_only`, a
    /// limit already later stays (E2B's connect never shortens a timeout).
    /// Under a pausing `on_lifetime`, `secs` also becomes what a resume after
    /// that pause grants. Audited as `lifecycle.set`.
    pub async fn set_timeout(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        secs: u64,
        extend_only: bool,
    ) -> Result<SandboxRecord> {
        if secs > stasis_core::manifest::MAX_TTL_SECS {
            return Err(Error::invalid(format!(
                "timeout must be at most {} seconds (365 days)",
                stasis_core::manifest::MAX_TTL_SECS
            ))
            .with_field("timeout"));
        }
        let detail = serde_json::json!({"timeout_secs": secs, "extend_only": extend_only});
        self.update_lifecycle(ctx, id, detail, |old, ran| {
            Ok(timeout_policy(old, ran, secs, extend_only))
        })
        .await
    }

    async fn update_lifecycle(
        &self,
        ctx: &Ctx,
        id: &SandboxId,
        mut detail: serde_json::Value,
        f: impl Fn(&LifecyclePolicy, i64) -> Result<LifecyclePolicy>,
    ) -> Result<SandboxRecord> {
        let mut tries = 0;
        loop {
            let rec = self.meta.get_for(&ctx.tenant, id).await?;
            if matches!(rec.state, SandboxState::Destroyed | SandboxState::Failed) {
                return Err(Error::state(format!(
                    "sandbox {id} is {}; its lifecycle can no longer change",
                    rec.state
                )));
            }
            let now = stasis_core::now_ms();
            let policy = f(&rec.manifest.lifecycle, rec.running_time_ms(now))?;
            match self
                .meta
                .set_lifecycle(id, &rec.manifest_digest, &policy)
                .await
            {
                Ok(new) => {
                    detail["before"] = serde_json::json!(rec.manifest.lifecycle);
                    detail["after"] = serde_json::json!(policy);
                    detail["manifest_digest"] = serde_json::json!(new.manifest_digest);
                    self.audit(ctx, "lifecycle.set", id.as_str(), detail).await;
                    return Ok(new);
                }
                Err(e) if e.code == stasis_core::ErrorCode::Busy && tries < 3 => tries += 1,
                Err(e) => return Err(e),
            }
        }
    }

    /// A sandbox just resumed past its lifetime, which paused it
    /// (`on_lifetime` a pause): grant it `renew_secs` more running time (0:
    /// lift the limit), so it is not paused again at once. Audited as
    /// `lifecycle.set`; a failure to record it is logged and the sandbox
    /// runs on (the next pass pauses it again, which is what it asked for).
    pub(super) async fn renew_lifetime(&self, ctx: &Ctx, rec: SandboxRecord) -> SandboxRecord {
        let old = &rec.manifest.lifecycle;
        let ran = rec.running_time_ms(stasis_core::now_ms());
        if old.on_lifetime.pause().is_none() || !old.lifetime_over(ran) {
            return rec;
        }
        let mut policy = old.clone();
        policy.max_lifetime_secs = match old.renew_secs {
            0 => 0,
            n => (ran.max(0) as u64).div_ceil(1000).saturating_add(n),
        };
        match self
            .meta
            .set_lifecycle(&rec.id, &rec.manifest_digest, &policy)
            .await
        {
            Ok(new) => {
                let detail = serde_json::json!({"renewed": true, "before": old, "after": policy,
                    "manifest_digest": new.manifest_digest});
                self.audit(ctx, "lifecycle.set", rec.id.as_str(), detail)
                    .await;
                new
            }
            Err(e) => {
                tracing::warn!(sandbox = %rec.id, error = %e, "lifetime not renewed");
                rec
            }
        }
    }

    /// Record a new sandbox's labels (validated before the create by
    /// [`stasis_meta::labels::validate_labels`]).
    pub async fn set_labels(&self, id: &SandboxId, labels: &Labels) -> Result<()> {
        if labels.is_empty() {
            return Ok(());
        }
        self.meta.set_labels(id, labels).await
    }

    /// The caller's sandboxes matching `f`, with their labels, and the
    /// next page's cursor.
    pub async fn list_filtered(
        &self,
        ctx: &Ctx,
        f: &ListFilter,
    ) -> Result<(Vec<(SandboxRecord, Labels)>, Option<String>)> {
        let (recs, next) = self.meta.list_filtered(&ctx.tenant, f).await?;
        let ids: Vec<SandboxId> = recs.iter().map(|r| r.id.clone()).collect();
        let mut labels = self.meta.labels_of(&ids).await?;
        Ok((
            recs.into_iter()
                .map(|r| {
                    let l = labels.remove(&r.id).unwrap_or_default();
                    (r, l)
                })
                .collect(),
            next,
        ))
    }

    /// What a listing shows: unless `all`, only the caller's own live
    /// sandboxes (no destroyed ones unless `f` asks for a state, no
    /// sandboxes the daemon made for itself unless `f` filters on their
    /// label).
    pub async fn list_view(
        &self,
        ctx: &Ctx,
        f: ListFilter,
        all: bool,
    ) -> Result<(Vec<(SandboxRecord, Labels)>, Option<String>)> {
        self.list_filtered(ctx, &listing(f, all)).await
    }

    /// Mark a sandbox the daemon makes for itself (an image build's `RUN`
    /// step): listings leave it out unless asked for everything.
    pub async fn mark_build(&self, id: &SandboxId) -> Result<()> {
        let l: Labels = [(BUILD_LABEL.to_string(), "run".to_string())].into();
        self.meta.set_labels(id, &l).await
    }

    /// The labels of one of the caller's sandboxes.
    pub async fn labels(&self, id: &SandboxId) -> Result<Labels> {
        Ok(self
            .meta
            .labels_of(std::slice::from_ref(id))
            .await?
            .remove(id)
            .unwrap_or_default())
    }
}

/// The label key (reserved) of sandboxes the daemon makes for itself.
pub const BUILD_LABEL: &str = "stasis.build";

/// [`Manager::list_view`]'s filter.
fn listing(mut f: ListFilter, all: bool) -> ListFilter {
    if !all {
        f.live_only |= f.state.is_none();
        if !f.labels.contains_key(BUILD_LABEL) {
            f.without_label = Some(BUILD_LABEL.to_string());
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listings_show_the_callers_live_sandboxes_unless_asked() {
        let plain = listing(ListFilter::default(), false);
        assert!(plain.live_only);
        assert_eq!(plain.without_label.as_deref(), Some(BUILD_LABEL));
        // A state asked for is shown (destroyed too); builds stay out.
        let destroyed = ListFilter {
            state: Some(SandboxState::Destroyed),
            ..Default::default()
        };
        let f = listing(destroyed, false);
        assert!(!f.live_only);
        assert_eq!(f.state, Some(SandboxState::Destroyed));
        assert!(f.without_label.is_some());
        // Filtering on the build label shows builds.
        let builds = ListFilter {
            labels: [(BUILD_LABEL.to_string(), "run".to_string())].into(),
            ..Default::default()
        };
        assert!(listing(builds, false).without_label.is_none());
        // Everything.
        let all = listing(ListFilter::default(), true);
        assert!(!all.live_only && all.without_label.is_none());
    }

    #[test]
    fn changes_apply_and_validate() {
        let old = LifecyclePolicy::default();
        assert!(LifecycleChange::default().apply(&old, 0).is_err());
        let c = LifecycleChange {
            idle_timeout_secs: Some(120),
            on_idle: Some(OnIdle::Destroy),
            ..Default::default()
        };
        let p = c.apply(&old, 0).unwrap();
        assert_eq!((p.idle_timeout_secs, p.on_idle), (120, OnIdle::Destroy));
        assert_eq!(p.paused_ttl_secs, old.paused_ttl_secs);
        let t = LifecycleChange {
            timeout_secs: Some(30),
            ..Default::default()
        };
        assert_eq!(t.apply(&old, 10_500).unwrap().max_lifetime_secs, 40);
        let bad = LifecycleChange {
            paused_ttl_secs: Some(0),
            ..Default::default()
        };
        let e = bad.apply(&old, 0).unwrap_err();
        assert_eq!(
            (e.code, e.field.as_deref()),
            (
                stasis_core::ErrorCode::InvalidArgument,
                Some("paused_ttl_secs")
            )
        );
        let both = LifecycleChange {
            timeout_secs: Some(1),
            max_lifetime_secs: Some(1),
            ..Default::default()
        };
        assert!(both.apply(&old, 0).is_err());
        let huge = LifecycleChange {
            idle_timeout_secs: Some(u64::MAX),
            ..Default::default()
        };
        assert_eq!(
            huge.apply(&old, 0).unwrap_err().field.as_deref(),
            Some("idle_timeout_secs")
        );
    }
}
