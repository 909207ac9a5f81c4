//! From what the E2B SDK asks at create to what stasis runs: the template
//! id onto an image, a snapshot or a stasis template; the timeout and
//! on-timeout choice onto the sandbox's lifecycle policy; the network
//! options onto its egress policy; metadata onto labels. Pure, so every
//! rule is unit-tested here; the handlers only call these.

use std::collections::BTreeMap;

use stasis_core::manifest::NetworkPolicy;
use stasis_core::{Error, LifecyclePolicy, Manifest, OnIdle, OnLifetime, SnapshotId};
use stasis_meta::Labels;

use super::error::{unsupported, E2bResult};
use super::model::{NetworkConfig, NewSandbox};

/// The envd version announced to the SDKs: the newest any pinned SDK gates a
/// feature on (the Python SDK 2.63's highest is 0.6.4), so none of them
/// falls back to an older protocol. The data plane serves that protocol.
pub const ENVD_VERSION: &str = "0.6.4";

/// E2B's default sandbox timeout, seconds (the SDKs' `default_sandbox_timeout`).
pub const DEFAULT_TIMEOUT_SECS: u64 = 300;

/// The `clientID` every sandbox reports (E2B's id of the node running it
/// means nothing to an E2B client).
pub const CLIENT_ID: &str = "stasis";

/// Labels the edge keeps for itself (never shown as metadata; refused in it).
pub const RESERVED_PREFIX: &str = "e2b.";
/// The template id the sandbox was created from, as the caller named it.
pub const LABEL_TEMPLATE: &str = "e2b.template";
/// `false` when the creator turned E2B's auto-resume off.
pub const LABEL_AUTO_RESUME: &str = "e2b.auto_resume";

/// E2B's default template: stasis's base image (the daemon's default root).
pub const ALIAS_BASE: &str = "base";
/// The code interpreter SDK's default template, and the image it maps to.
pub const ALIAS_CODE_INTERPRETER: &str = "code-interpreter-v1";
pub const CODE_INTERPRETER_IMAGE: &str = "stasis-code-interpreter";

/// E2B's "all traffic" network.
const ALL_V4: &str = "0.0.0.0/0";
const ALL_V6: &str = "::/0";

/// What a template id names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// An image (`None`: the daemon's base).
    Image(Option<String>),
    /// A snapshot (`Sandbox.create(snapshot_id)`).
    Snapshot(SnapshotId),
    /// A stasis template (`name` or `name:version`) if one exists by that
    /// name, else an image reference.
    Named(String),
}

pub fn source_of(template_id: &str) -> E2bResult<Source> {
    let t = template_id.trim();
    if t.is_empty() {
        return Err(Error::invalid("templateID must not be empty")
            .with_field("templateID")
            .into());
    }
    Ok(match t {
        ALIAS_BASE => Source::Image(None),
        ALIAS_CODE_INTERPRETER => Source::Image(Some(CODE_INTERPRETER_IMAGE.to_string())),
        _ if t.starts_with("snap-") => Source::Snapshot(SnapshotId::parse(t)?),
        _ => Source::Named(t.to_string()),
    })
}

/// The manifest of an E2B sandbox: `base` (the template's, the snapshot's or
/// the default) with the request's env vars, lifecycle and network.
pub fn manifest(mut base: Manifest, b: &NewSandbox) -> E2bResult<Manifest> {
    refuse_unsupported(b)?;
    if let Some(env) = &b.env_vars {
        base.env
            .extend(env.iter().map(|(k, v)| (k.clone(), v.clone())));
    }
    base.lifecycle = lifecycle(&base.lifecycle, b)?;
    if let Some(p) = egress(b.allow_internet_access, b.network.as_ref())? {
        base.network = p;
    }
    base.validate()?;
    Ok(base)
}

fn refuse_unsupported(b: &NewSandbox) -> E2bResult<()> {
    if b.mcp.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(unsupported("mcp (the MCP gateway)"));
    }
    if b.iam.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(unsupported("iam (workload identity tokens)"));
    }
    if b.volume_mounts
        .as_ref()
        .is_some_and(|v| v.as_array().is_none_or(|a| !a.is_empty()))
    {
        return Err(unsupported("volumeMounts (E2B volumes)"));
    }
    Ok(())
}

/// E2B's timeout is the sandbox's lifetime. stasis counts it as running
/// time (paused time is not spent) and, at its end, pauses the sandbox
/// (kept per its paused TTL) unless the create asked to kill on timeout
/// (`autoPause: false`). The idle policy is off: an E2B sandbox runs until
/// its timeout, as E2B users expect.
pub fn lifecycle(old: &LifecyclePolicy, b: &NewSandbox) -> E2bResult<LifecyclePolicy> {
    let timeout = b.timeout.unwrap_or(DEFAULT_TIMEOUT_SECS);
    let on_lifetime = match (b.auto_pause, b.auto_pause_memory) {
        (Some(false), _) => OnLifetime::Destroy,
        (_, Some(false)) => OnLifetime::PauseFilesystem,
        _ => OnLifetime::Pause,
    };
    if on_lifetime == OnLifetime::PauseFilesystem && b.auto_resume.is_some_and(|a| a.enabled) {
        return Err(Error::invalid(
            "autoResume cannot be enabled with autoPauseMemory: false (a filesystem-only pause is resumed by connect)",
        )
        .with_field("autoResume")
        .into());
    }
    let mut p = old.clone();
    p.on_idle = OnIdle::Nothing;
    p.max_lifetime_secs = timeout.max(1);
    p.on_lifetime = on_lifetime;
    p.renew_secs = if on_lifetime.is_destroy() { 0 } else { timeout };
    Ok(p)
}

fn is_all(e: &str) -> bool {
    e == ALL_V4 || e == ALL_V6
}

/// E2B's egress options as a stasis policy, or None when none was given
/// (the template's policy stays; stasis's default is no network).
///
/// E2B allows a destination in `allowOut` or not in `denyOut`; stasis
/// allows what `allow` admits and `deny` does not. So: a deny of all
/// traffic (or `allow_internet_access: false`) leaves `allowOut` as the
/// allowlist; `allow_internet_access: true` or a partial `denyOut` allows
/// every network (`0.0.0.0/0`, `::/0`) but what `denyOut` names. stasis
/// has no "every host name" entry: names must be listed in `allowOut`.
pub fn egress(
    allow_internet: Option<bool>,
    net: Option<&NetworkConfig>,
) -> E2bResult<Option<NetworkPolicy>> {
    let empty = NetworkConfig::default();
    let n = net.unwrap_or(&empty);
    if n.rules
        .as_ref()
        .is_some_and(|r| r.as_object().is_none_or(|o| !o.is_empty()))
    {
        return Err(unsupported("network.rules (request transforms)"));
    }
    if n.egress_proxy.as_ref().is_some_and(|p| !p.is_null()) {
        return Err(unsupported("network.egressProxy"));
    }
    if n.mask_request_host.is_some() {
        return Err(unsupported("network.maskRequestHost"));
    }
    if n.https_ports.as_ref().is_some_and(|p| !p.is_empty()) {
        return Err(unsupported("network.httpsPorts"));
    }
    let allow_internet = allow_internet.or(n.allow_internet_access);
    if allow_internet.is_none() && n.allow_out.is_none() && n.deny_out.is_none() {
        return Ok(None);
    }
    let allow_out = n.allow_out.clone().unwrap_or_default();
    let deny_out = n.deny_out.clone().unwrap_or_default();
    let deny_all = allow_internet == Some(false) || deny_out.iter().any(|e| is_all(e));
    let internet = !deny_all && (allow_internet == Some(true) || !deny_out.is_empty());
    let mut allow: Vec<String> = allow_out.into_iter().filter(|e| !is_all(e)).collect();
    let mut deny = Vec::new();
    if internet {
        allow.extend([ALL_V4.to_string(), ALL_V6.to_string()]);
        deny = deny_out;
    } else if n
        .allow_out
        .as_ref()
        .is_some_and(|a| a.iter().any(|e| is_all(e)))
    {
        allow.extend([ALL_V4.to_string(), ALL_V6.to_string()]);
    }
    Ok(Some(NetworkPolicy { allow, deny }))
}

/// Whether a policy lets every network out (E2B's `allowInternetAccess`).
pub fn internet_of(p: &NetworkPolicy) -> bool {
    p.allow.iter().any(|e| e == ALL_V4) && p.deny.is_empty()
}

/// The labels of a new E2B sandbox: its metadata and the edge's own.
pub fn labels(b: &NewSandbox) -> E2bResult<Labels> {
    let mut out: Labels = BTreeMap::new();
    for (k, v) in b.metadata.iter().flatten() {
        if k.starts_with(RESERVED_PREFIX) {
            return Err(Error::invalid(format!(
                "metadata key {k:?}: keys starting with {RESERVED_PREFIX:?} are reserved"
            ))
            .with_field("metadata")
            .into());
        }
        out.insert(k.clone(), v.clone());
    }
    out.insert(LABEL_TEMPLATE.into(), b.template_id.trim().to_string());
    if b.auto_resume.is_some_and(|a| !a.enabled) {
        out.insert(LABEL_AUTO_RESUME.into(), "false".into());
    }
    stasis_meta::labels::validate_labels(&out).map_err(|e| {
        let mut e = e;
        e.field = Some("metadata".into());
        e
    })?;
    Ok(out)
}

/// Whether the data plane may resume this paused sandbox on traffic (E2B's
/// auto-resume; on unless the create turned it off). `connect` always may.
pub fn auto_resume_of(labels: &Labels) -> bool {
    labels.get(LABEL_AUTO_RESUME).map(String::as_str) != Some("false")
}

/// The user's metadata among a sandbox's labels.
pub fn metadata_of(labels: &Labels) -> BTreeMap<String, String> {
    labels
        .iter()
        .filter(|(k, _)| !k.starts_with(RESERVED_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::model::AutoResume;

    fn body(json: serde_json::Value) -> NewSandbox {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn template_ids_name_images_snapshots_and_templates() {
        assert_eq!(source_of("base").unwrap(), Source::Image(None));
        assert_eq!(
            source_of("code-interpreter-v1").unwrap(),
            Source::Image(Some("stasis-code-interpreter".into()))
        );
        let s = SnapshotId::generate();
        assert_eq!(source_of(s.as_str()).unwrap(), Source::Snapshot(s));
        assert_eq!(
            source_of("python:3.12").unwrap(),
            Source::Named("python:3.12".into())
        );
        assert!(source_of(" ").is_err());
        assert!(source_of("snap-../x").is_err());
    }

    #[test]
    fn the_sdk_body_parses_and_unknown_fields_are_refused() {
        let b = body(serde_json::json!({
            "templateID": "base", "timeout": 60, "autoPause": true, "autoPauseMemory": true,
            "autoResume": {"enabled": true}, "secure": true, "allow_internet_access": false,
            "metadata": {"k": "v"}, "envVars": {"A": "1"}, "mcp": null,
            "network": {"allowOut": ["1.1.1.1"], "denyOut": ["0.0.0.0/0"]}
        }));
        assert_eq!(b.timeout, Some(60));
        assert!(serde_json::from_value::<NewSandbox>(
            serde_json::json!({"templateID": "base", "bogus": 1})
        )
        .is_err());
    }

    #[test]
    fn timeout_is_a_lifetime_that_pauses_unless_kill_was_asked() {
        let d = LifecyclePolicy::default();
        let p = lifecycle(&d, &body(serde_json::json!({"templateID": "base"}))).unwrap();
        assert_eq!(p.max_lifetime_secs, DEFAULT_TIMEOUT_SECS);
        assert_eq!(p.on_lifetime, OnLifetime::Pause);
        assert_eq!(p.renew_secs, DEFAULT_TIMEOUT_SECS);
        assert_eq!(p.on_idle, OnIdle::Nothing);
        assert_eq!(p.paused_ttl_secs, d.paused_ttl_secs);
        let kill =
            body(serde_json::json!({"templateID": "base", "timeout": 5, "autoPause": false}));
        let p = lifecycle(&d, &kill).unwrap();
        assert_eq!(
            (p.max_lifetime_secs, p.on_lifetime, p.renew_secs),
            (5, OnLifetime::Destroy, 0)
        );
        let fs = body(
            serde_json::json!({"templateID": "base", "autoPause": true, "autoPauseMemory": false}),
        );
        assert_eq!(
            lifecycle(&d, &fs).unwrap().on_lifetime,
            OnLifetime::PauseFilesystem
        );
        let mut bad = fs;
        bad.auto_resume = Some(AutoResume { enabled: true });
        assert!(lifecycle(&d, &bad).is_err());
        let zero = body(serde_json::json!({"templateID": "base", "timeout": 0}));
        assert_eq!(lifecycle(&d, &zero).unwrap().max_lifetime_secs, 1);
    }

    #[test]
    fn egress_options_become_a_stasis_policy() {
        let all = vec![ALL_V4.to_string(), ALL_V6.to_string()];
        let net = |v: serde_json::Value| -> NetworkConfig { serde_json::from_value(v).unwrap() };
        assert_eq!(egress(None, None).unwrap(), None);
        assert_eq!(
            egress(Some(false), None).unwrap(),
            Some(NetworkPolicy::default())
        );
        let p = egress(Some(true), None).unwrap().unwrap();
        assert_eq!((p.allow, p.deny.len()), (all.clone(), 0));
        // Allow one address, deny everything else: an allowlist.
        let n =
            net(serde_json::json!({"allowOut": ["1.1.1.1", "pypi.org"], "denyOut": ["0.0.0.0/0"]}));
        let p = egress(None, Some(&n)).unwrap().unwrap();
        assert_eq!(p.allow, vec!["1.1.1.1", "pypi.org"]);
        assert!(p.deny.is_empty());
        // Deny one address: everything but it.
        let n = net(serde_json::json!({"denyOut": ["8.8.8.8"]}));
        let p = egress(None, Some(&n)).unwrap().unwrap();
        assert_eq!(
            (p.allow, p.deny),
            (all.clone(), vec!["8.8.8.8".to_string()])
        );
        assert!(internet_of(&egress(Some(true), None).unwrap().unwrap()));
        for bad in [
            serde_json::json!({"rules": {"a.test": [{}]}}),
            serde_json::json!({"egressProxy": {"address": "p:1080"}}),
            serde_json::json!({"maskRequestHost": "${PORT}-x.test"}),
            serde_json::json!({"httpsPorts": [3000]}),
        ] {
            let e = egress(None, Some(&net(bad))).unwrap_err();
            assert_eq!(super::super::error::status_of(e.0.code), 400);
            assert!(e.0.message.contains("not supported"));
        }
    }

    #[test]
    fn unsupported_create_options_are_refused_with_a_message() {
        for extra in [
            serde_json::json!({"mcp": {"x": {}}}),
            serde_json::json!({"iam": {"tokens": {}}}),
            serde_json::json!({"volumeMounts": [{"name": "v", "path": "/v"}]}),
        ] {
            let mut v = serde_json::json!({"templateID": "base"});
            v.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            let e = manifest(Manifest::default(), &body(v)).unwrap_err();
            assert!(e.0.message.contains("not supported"), "{}", e.0.message);
        }
        let m = manifest(
            Manifest::default(),
            &body(serde_json::json!({"templateID": "base", "envVars": {"A": "1"}, "volumeMounts": []})),
        )
        .unwrap();
        assert_eq!(m.env.get("A").map(String::as_str), Some("1"));
    }

    #[test]
    fn metadata_becomes_labels_beside_the_edges_own() {
        let b = body(
            serde_json::json!({"templateID": "base", "metadata": {"sandbox_test_id": "t1"},
            "autoResume": {"enabled": false}}),
        );
        let l = labels(&b).unwrap();
        assert_eq!(l.get(LABEL_TEMPLATE).map(String::as_str), Some("base"));
        assert_eq!(l.get(LABEL_AUTO_RESUME).map(String::as_str), Some("false"));
        let md = metadata_of(&l);
        assert_eq!(md.len(), 1);
        assert_eq!(md["sandbox_test_id"], "t1");
        let reserved = body(serde_json::json!({"templateID": "base", "metadata": {"e2b.x": "1"}}));
        assert!(labels(&reserved).is_err());
        let bad = body(serde_json::json!({"templateID": "base", "metadata": {"a b": "1"}}));
        assert_eq!(
            labels(&bad).unwrap_err().0.field.as_deref(),
            Some("metadata")
        );
    }
}
