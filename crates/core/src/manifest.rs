//! The manifest: the contract a sandbox is created under.
//!
//! Unknown fields are refused (a typo must not silently fall back to a
//! default), and `validate` names the offending field.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::error::{Error, ErrorCode};

pub mod lifetime;
pub mod network;
pub use lifetime::OnLifetime;
pub use network::NetworkPolicy;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// Linux namespaces + cgroups + overlayfs on the host kernel.
    Process,
    /// A QEMU microVM with full memory snapshots.
    Microvm,
}

impl BackendKind {
    pub fn as_str(self) -> &'static str {
        match self {
            BackendKind::Process => "process",
            BackendKind::Microvm => "microvm",
        }
    }
    pub fn parse(s: &str) -> Result<Self, Error> {
        match s {
            "process" => Ok(BackendKind::Process),
            "microvm" => Ok(BackendKind::Microvm),
            _ => Err(Error::invalid(format!(
                "unknown backend {s:?} (expected process or microvm)"
            ))),
        }
    }
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the daemon does when a running sandbox has been idle for `idle_timeout_secs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OnIdle {
    /// Pause with memory: processes continue mid-execution on resume.
    #[default]
    Pause,
    /// Keep only the filesystem: processes are stopped, files survive.
    PauseFilesystem,
    /// Destroy the sandbox.
    Destroy,
    /// Never act on idleness.
    Nothing,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Resources {
    /// CPU quota in cores (fractions allowed).
    pub cpus: f64,
    /// Memory limit in MiB (for a microVM: guest RAM).
    pub memory_mb: u64,
    /// Maximum number of processes/threads.
    pub pids: u64,
    /// Cap on the writable layer in MiB (0: no cap beyond the host's).
    pub disk_mb: u64,
}

impl Default for Resources {
    fn default() -> Self {
        Resources {
            cpus: 1.0,
            memory_mb: 256,
            pids: 256,
            disk_mb: 1024,
        }
    }
}

/// One lifecycle policy per sandbox. Fixed at create; reading or
/// reconnecting to a sandbox never changes it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LifecyclePolicy {
    /// Seconds without API activity before `on_idle` applies.
    pub idle_timeout_secs: u64,
    pub on_idle: OnIdle,
    /// A paused sandbox is destroyed this long after it was paused.
    pub paused_ttl_secs: u64,
    /// Running time (paused time excluded) after which the sandbox is destroyed; 0 = no limit.
    pub max_lifetime_secs: u64,
    /// Take a checkpoint snapshot of the running sandbox this often; 0 = off.
    /// When the node running it dies, another node resumes it from the newest
    /// of its last checkpoint and its last pause. Left out of the serialized
    /// manifest when 0, so existing manifests keep their digest.
    #[serde(skip_serializing_if = "is_zero")]
    pub checkpoint_secs: u64,
    /// After an idle pause, keep the stopped compute and its RAM on the node
    /// this long (standby), so a request in that window continues the same
    /// VM at once; 0 = off; unset: the daemon's default. The pause is
    /// complete and stored as always. Left out of the serialized manifest
    /// when unset, so existing manifests keep their digest.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub standby_secs: Option<u64>,
    /// What reaching `max_lifetime_secs` does (default `destroy`; see
    /// [`OnLifetime`]). Left out when `destroy`, so digests stay.
    #[serde(skip_serializing_if = "OnLifetime::is_destroy")]
    pub on_lifetime: OnLifetime,
    /// With `on_lifetime` a pause: the running time a resume after that
    /// pause grants (0: the limit is lifted). Left out when 0.
    #[serde(skip_serializing_if = "is_zero")]
    pub renew_secs: u64,
    /// Process backend: keep a memory-paused sandbox's processes frozen on
    /// the node for as long as it stays paused, instead of ending them once
    /// its standby window (or the node's `--frozen-secs`) is over, which
    /// turns the pause into a filesystem-only one. Costs the node the
    /// frozen processes' RAM for the whole pause (the cost report counts
    /// it). The microVM backend keeps memory in every pause's snapshot and
    /// ignores it. Left out when false, so digests stay.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub keep_frozen: bool,
}

/// The policy's deadlines on the daemon's millisecond clock. Checked: a
/// duration too long to represent (only stored records from before the
/// maxima can carry one) is a deadline never reached, not one in the past.
impl LifecyclePolicy {
    /// `running_ms` of running time reached `max_lifetime_secs` (never when 0).
    pub fn lifetime_over(&self, running_ms: i64) -> bool {
        self.max_lifetime_secs > 0 && running_ms >= crate::secs_to_ms(self.max_lifetime_secs)
    }

    /// `idle_ms` without activity reached the idle timeout (never with `on_idle: nothing`).
    pub fn idle_over(&self, idle_ms: i64) -> bool {
        self.on_idle != OnIdle::Nothing && idle_ms >= crate::secs_to_ms(self.idle_timeout_secs)
    }

    /// `since_ms` since the last checkpoint reached `checkpoint_secs` (never when 0).
    pub fn checkpoint_due(&self, since_ms: i64) -> bool {
        self.checkpoint_secs > 0 && since_ms >= crate::secs_to_ms(self.checkpoint_secs)
    }

    /// When a sandbox paused at `paused_at_ms` expires.
    pub fn paused_expiry_ms(&self, paused_at_ms: i64) -> i64 {
        paused_at_ms.saturating_add(crate::secs_to_ms(self.paused_ttl_secs))
    }
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl Default for LifecyclePolicy {
    fn default() -> Self {
        LifecyclePolicy {
            idle_timeout_secs: 5,
            on_idle: OnIdle::Pause,
            paused_ttl_secs: 7 * 24 * 3600,
            max_lifetime_secs: 0,
            checkpoint_secs: 0,
            standby_secs: None,
            on_lifetime: OnLifetime::Destroy,
            renew_secs: 0,
            keep_frozen: false,
        }
    }
}

/// Largest `lifecycle.idle_timeout_secs` and `lifecycle.checkpoint_secs`: 30 days.
pub const MAX_IDLE_TIMEOUT_SECS: u64 = 30 * 24 * 3600;
/// Largest `lifecycle.standby_secs`: one day.
pub const MAX_STANDBY_SECS: u64 = 24 * 3600;
/// Largest `lifecycle.paused_ttl_secs` and `lifecycle.max_lifetime_secs`: 365 days.
pub const MAX_TTL_SECS: u64 = 365 * 24 * 3600;

/// The only manifest format version this daemon accepts.
pub const MANIFEST_VERSION: u32 = 1;

/// A read-only input: a host path the operator allows, visible at `target`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mount {
    /// Absolute host path (file or directory); must lie under a root the
    /// operator allowed (`stasis serve --allow-mount <dir>`).
    pub source: String,
    /// Absolute path inside the sandbox. Always mounted read-only.
    pub target: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Manifest format version; only `MANIFEST_VERSION` is accepted.
    #[serde(default = "default_version")]
    pub version: u32,
    /// Defaults to the daemon's default backend.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backend: Option<BackendKind>,
    /// An image (never a host path): `name[:tag]` of one of the tenant's or
    /// the public images (the daemon pins it to its `sha256:` id at create),
    /// or a directory the operator put under the daemon's images directory.
    /// Process backend: the image's read-only root directory, or
    /// `<images>/<name>/rootfs/` (default: the host's `/`, masked).
    /// microVM backend: the guest image `<images>/<name>/` (default "default").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default)]
    pub resources: Resources,
    #[serde(default)]
    pub lifecycle: LifecyclePolicy,
    /// Environment given to every exec and session (request env wins).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Working directory inside the sandbox, created if missing.
    #[serde(default = "default_workdir")]
    pub workdir: String,
    /// Read-only input mounts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mounts: Vec<Mount>,
    /// Absolute directories inside the sandbox where results are written;
    /// the only places outputs are collected from.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<String>,
    #[serde(default)]
    pub network: NetworkPolicy,
    /// Names of tenant secrets delivered (as environment variables of the
    /// same name) to each exec and session. Values never enter the manifest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// The user execs and sessions run as, `USER[:GROUP]` (names or ids,
    /// resolved in the sandbox's own `/etc/passwd` and `/etc/group`; see
    /// [`crate::user`]). Default: the image's `USER`, else root.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// The default session command: what a session started without a
    /// command runs. Default: the image's ENTRYPOINT + CMD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<Vec<String>>,
    /// Start the default command (`command`, else the image's ENTRYPOINT +
    /// CMD) as a session when the sandbox is created, as a container runs
    /// its CMD: a server the sandbox offers (the code interpreter's). The
    /// create fails and leaves nothing when there is no default command or
    /// it does not start. A pause keeps it running (it is not started again
    /// on resume).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub autostart: bool,
}

fn default_version() -> u32 {
    MANIFEST_VERSION
}

fn default_workdir() -> String {
    "/workspace".to_string()
}

impl Default for Manifest {
    fn default() -> Self {
        Manifest {
            backend: None,
            image: None,
            resources: Resources::default(),
            lifecycle: LifecyclePolicy::default(),
            env: BTreeMap::new(),
            workdir: default_workdir(),
            mounts: Vec::new(),
            outputs: Vec::new(),
            network: NetworkPolicy::default(),
            secrets: Vec::new(),
            user: None,
            command: None,
            autostart: false,
            version: MANIFEST_VERSION,
        }
    }
}

pub(crate) fn bad(field: &str, msg: impl Into<String>) -> Error {
    Error::new(
        ErrorCode::InvalidManifest,
        format!("{field}: {}", msg.into()),
    )
    .with_field(field)
}

/// An absolute sandbox path without `..`, NUL or empty components' surprises.
fn valid_abs_path(p: &str) -> bool {
    p.starts_with('/') && p.len() <= 4096 && !p.contains('\0') && !p.split('/').any(|c| c == "..")
}

/// An image is named, never a path: `name[:tag]`, each part
/// `[A-Za-z0-9._-]` of 1 to 128 characters not starting with `.` (so neither
/// `.` nor `..` nor a hidden entry), or an image id `sha256:<64 hex>`. The
/// daemon looks a name up among the tenant's and the public images, then
/// under the operator's images directory.
pub fn validate_image_name(name: &str) -> Result<(), Error> {
    let part = |p: &str| {
        !p.is_empty()
            && p.len() <= 128
            && !p.starts_with('.')
            && p.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    };
    let ok = match name.strip_prefix("sha256:") {
        Some(hex) => hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        None => match name.split_once(':') {
            Some((n, tag)) => part(n) && part(tag),
            None => part(name),
        },
    };
    if ok {
        Ok(())
    } else {
        let shown: String = name.chars().take(64).collect();
        Err(bad(
            "image",
            format!(
                "{shown:?} is not an image name (name[:tag] with [A-Za-z0-9._-], 1-128 characters, \
                 not starting with '.', or sha256:<64 hex>); images are built, imported or \
                 registered by the operator, host paths are refused"
            ),
        ))
    }
}

/// Environment variable names: the POSIX portable set.
pub fn validate_env_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && !name.as_bytes()[0].is_ascii_digit()
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

impl Manifest {
    /// Parse and validate a manifest from JSON (see [`Manifest::parse`]).
    pub fn from_json(v: serde_json::Value) -> Result<Self, Error> {
        let m = Self::parse(v)?;
        m.validate()?;
        Ok(m)
    }

    /// Parse a manifest from JSON without range checks (the daemon's
    /// create/restore validate, and audit what they refuse). Objects are
    /// required at every level; a type or shape error is `invalid_manifest`
    /// naming the field path (`manifest` for the value itself).
    pub fn parse(v: serde_json::Value) -> Result<Self, Error> {
        crate::strict::from_value(v, ErrorCode::InvalidManifest, "manifest")
    }

    pub fn validate(&self) -> Result<(), Error> {
        if self.version != MANIFEST_VERSION {
            return Err(bad(
                "version",
                format!(
                    "unsupported manifest version {} (this daemon reads {MANIFEST_VERSION})",
                    self.version
                ),
            ));
        }
        let r = &self.resources;
        if !(r.cpus.is_finite() && r.cpus >= 0.05 && r.cpus <= 64.0) {
            return Err(bad("resources.cpus", "must be between 0.05 and 64"));
        }
        if !(16..=65536).contains(&r.memory_mb) {
            return Err(bad("resources.memory_mb", "must be between 16 and 65536"));
        }
        if !(8..=1_000_000).contains(&r.pids) {
            return Err(bad("resources.pids", "must be between 8 and 1000000"));
        }
        if r.disk_mb > 1_048_576 {
            return Err(bad("resources.disk_mb", "must be at most 1048576 (1 TiB)"));
        }
        let l = &self.lifecycle;
        if l.idle_timeout_secs == 0 && l.on_idle != OnIdle::Nothing {
            return Err(bad(
                "lifecycle.idle_timeout_secs",
                "must be at least 1 (use on_idle: nothing to disable)",
            ));
        }
        if l.idle_timeout_secs > MAX_IDLE_TIMEOUT_SECS {
            return Err(bad(
                "lifecycle.idle_timeout_secs",
                format!("must be at most {MAX_IDLE_TIMEOUT_SECS} (30 days)"),
            ));
        }
        if l.checkpoint_secs > MAX_IDLE_TIMEOUT_SECS {
            return Err(bad(
                "lifecycle.checkpoint_secs",
                format!("must be at most {MAX_IDLE_TIMEOUT_SECS} (30 days; 0 = off)"),
            ));
        }
        if l.standby_secs.is_some_and(|s| s > MAX_STANDBY_SECS) {
            return Err(bad(
                "lifecycle.standby_secs",
                format!("must be at most {MAX_STANDBY_SECS} (one day; 0 = off)"),
            ));
        }
        if l.paused_ttl_secs == 0 || l.paused_ttl_secs > MAX_TTL_SECS {
            return Err(bad(
                "lifecycle.paused_ttl_secs",
                format!("must be between 1 and {MAX_TTL_SECS} (365 days)"),
            ));
        }
        if l.max_lifetime_secs > MAX_TTL_SECS {
            return Err(bad(
                "lifecycle.max_lifetime_secs",
                format!("must be at most {MAX_TTL_SECS} (365 days; 0 = no limit)"),
            ));
        }
        if l.renew_secs > MAX_TTL_SECS {
            return Err(bad(
                "lifecycle.renew_secs",
                format!("must be at most {MAX_TTL_SECS} (365 days)"),
            ));
        }
        if let Some(image) = &self.image {
            validate_image_name(image)?;
        }
        if !valid_abs_path(&self.workdir) {
            return Err(bad("workdir", "must be an absolute path without '..'"));
        }
        if self.mounts.len() > 64 {
            return Err(bad("mounts", "at most 64 mounts"));
        }
        for (i, m) in self.mounts.iter().enumerate() {
            if !valid_abs_path(&m.source) {
                return Err(bad(
                    &format!("mounts[{i}].source"),
                    "must be an absolute host path without '..'",
                ));
            }
            if !valid_abs_path(&m.target) || m.target == "/" {
                return Err(bad(
                    &format!("mounts[{i}].target"),
                    "must be an absolute path without '..', not /",
                ));
            }
        }
        if self.outputs.len() > 64 {
            return Err(bad("outputs", "at most 64 output directories"));
        }
        for (i, o) in self.outputs.iter().enumerate() {
            if !valid_abs_path(o) || o == "/" {
                return Err(bad(
                    &format!("outputs[{i}]"),
                    "must be an absolute path without '..', not /",
                ));
            }
        }
        self.network.validate()?;
        if self.secrets.len() > 64 {
            return Err(bad("secrets", "at most 64 secrets"));
        }
        for (i, s) in self.secrets.iter().enumerate() {
            if !validate_env_name(s) || s.len() > 128 {
                return Err(bad(
                    &format!("secrets[{i}]"),
                    "must be a variable name ([A-Za-z_][A-Za-z0-9_]*, at most 128)",
                ));
            }
        }
        for (k, v) in &self.env {
            if !validate_env_name(k) {
                return Err(bad(&format!("env.{k}"), "invalid variable name"));
            }
            if v.contains('\0') || v.len() > 128 * 1024 {
                return Err(bad(&format!("env.{k}"), "value has NUL or is over 128 KiB"));
            }
        }
        if let Some(u) = &self.user {
            crate::user::UserSpec::parse(u, "user").map_err(|e| {
                Error::new(ErrorCode::InvalidManifest, e.message).with_field("user")
            })?;
        }
        if let Some(c) = &self.command {
            let bytes: usize = c.iter().map(|a| a.len() + 1).sum();
            if c.first().is_none_or(|a| a.is_empty())
                || c.iter().any(|a| a.contains('\0'))
                || c.len() > 1024
                || bytes > 128 * 1024
            {
                return Err(bad(
                    "command",
                    "must name a command (non-empty, no NUL, at most 1024 arguments and 128 KiB)",
                ));
            }
        }
        Ok(())
    }

    /// Content digest of the manifest (blake3 over its canonical JSON).
    pub fn digest(&self) -> String {
        let json = serde_json::to_vec(self).expect("manifest serializes");
        blake3::hash(&json).to_hex().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_are_valid() {
        Manifest::default().validate().unwrap();
        let m = Manifest::from_json(json!({})).unwrap();
        assert_eq!(m, Manifest::default());
    }

    #[test]
    fn unknown_field_refused() {
        let e = Manifest::from_json(json!({"resurces": {}})).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidManifest);
        assert!(e.message.contains("resurces"), "{}", e.message);
    }

    #[test]
    fn bad_values_name_their_field() {
        let cases = [
            (
                json!({"resources": {"memory_mb": 1}}),
                "resources.memory_mb",
            ),
            (json!({"resources": {"cpus": -1.0}}), "resources.cpus"),
            (
                json!({"lifecycle": {"idle_timeout_secs": 0}}),
                "lifecycle.idle_timeout_secs",
            ),
            (json!({"workdir": "relative"}), "workdir"),
            (json!({"workdir": "/a/../b"}), "workdir"),
            (json!({"env": {"1X": "y"}}), "env.1X"),
            (json!({"version": 2}), "version"),
            (
                json!({"mounts": [{"source": "rel", "target": "/in"}]}),
                "mounts[0].source",
            ),
            (
                json!({"mounts": [{"source": "/data", "target": "/"}]}),
                "mounts[0].target",
            ),
            (json!({"outputs": ["/out/../etc"]}), "outputs[0]"),
            (
                json!({"network": {"allow": ["*.com:443"]}}),
                "network.allow[0]",
            ),
            (
                json!({"network": {"allow": ["127.0.0.1:0"]}}),
                "network.allow[0]",
            ),
            (
                json!({"network": {"allow": ["a.test"], "deny": ["b.test"]}}),
                "network.deny[0]",
            ),
            (json!({"secrets": ["API-KEY"]}), "secrets[0]"),
            (json!({"user": "root:"}), "user"),
            (json!({"user": "../x"}), "user"),
            (json!({"command": []}), "command"),
            (json!({"command": [""]}), "command"),
            (json!({"command": ["sh", "a\u{0}b"]}), "command"),
        ];
        for (v, field) in cases {
            let e = Manifest::from_json(v.clone()).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{v}");
        }
    }

    #[test]
    fn image_is_a_name_never_a_path() {
        for bad_image in [
            "/",
            "/usr/..",
            "/etc/..",
            "/var/../",
            "/var/lib/stasis",
            "..",
            ".",
            ".hidden",
            "a/b",
            "../default",
            "default/..",
            "",
            " x",
            "x\0",
            "~root",
            "$HOME",
            "a:b:c",
            "x:",
            ":tag",
            "x:../y",
            "sha256:abc",
            "sha256:../../etc",
        ] {
            let e = Manifest::from_json(json!({"image": bad_image})).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidManifest, "{bad_image:?}");
            assert_eq!(e.field.as_deref(), Some("image"), "{bad_image:?}");
            assert!(e.message.contains("host paths are refused"), "{e}");
        }
        let long = "x".repeat(129);
        let e = Manifest::from_json(json!({ "image": long })).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("image"));
        let digest = format!("sha256:{}", "ab".repeat(32));
        for good in [
            "default",
            "py3.12",
            "ubuntu-24.04_min",
            &"x".repeat(128),
            "py:3.11",
            &digest,
        ] {
            let m = Manifest::from_json(json!({ "image": good })).unwrap();
            assert_eq!(m.image.as_deref(), Some(good));
        }
    }

    #[test]
    fn durations_beyond_their_maximum_are_refused() {
        for (field, key, max) in [
            (
                "lifecycle.max_lifetime_secs",
                "max_lifetime_secs",
                MAX_TTL_SECS,
            ),
            ("lifecycle.paused_ttl_secs", "paused_ttl_secs", MAX_TTL_SECS),
            (
                "lifecycle.idle_timeout_secs",
                "idle_timeout_secs",
                MAX_IDLE_TIMEOUT_SECS,
            ),
            (
                "lifecycle.checkpoint_secs",
                "checkpoint_secs",
                MAX_IDLE_TIMEOUT_SECS,
            ),
            ("lifecycle.standby_secs", "standby_secs", MAX_STANDBY_SECS),
        ] {
            Manifest::from_json(json!({"lifecycle": {key: max}})).unwrap();
            for v in [
                json!(max + 1),
                json!(u64::MAX),
                json!(10_000_000_000_000_000u64),
            ] {
                let e = Manifest::from_json(json!({"lifecycle": {key: v}})).unwrap_err();
                assert_eq!(e.field.as_deref(), Some(field), "{key}={v}: {e}");
            }
            // Not representable at all: a type error, still naming the field.
            for v in [
                json!(-1),
                json!(1e16),
                json!(18446744073709551616.0),
                json!("1"),
            ] {
                let e = Manifest::from_json(json!({"lifecycle": {key: v}})).unwrap_err();
                assert_eq!(e.code, ErrorCode::InvalidManifest);
                assert_eq!(e.field.as_deref(), Some(field), "{key}={v}: {e}");
            }
        }
        assert_eq!(crate::secs_to_ms(u64::MAX), i64::MAX);
        assert_eq!(crate::secs_to_ms(MAX_TTL_SECS), MAX_TTL_SECS as i64 * 1000);
    }

    /// The reaper's deadlines for every duration a stored record may hold:
    /// a huge one is never reached (it used to wrap into the past and
    /// destroy the sandbox at once).
    #[test]
    fn deadlines_never_wrap_into_the_past() {
        let now = 1_800_000_000_000i64; // 2027, in ms
        let ten_years_ms = 10 * 365 * 24 * 3600 * 1000i64;
        for secs in [
            100 * MAX_TTL_SECS,
            10_000_000_000_000_000,
            (i64::MAX / 1000) as u64,
            (i64::MAX / 1000) as u64 + 1,
            i64::MAX as u64,
            i64::MAX as u64 + 1,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let p = LifecyclePolicy {
                idle_timeout_secs: secs,
                on_idle: OnIdle::Destroy,
                paused_ttl_secs: secs,
                max_lifetime_secs: secs,
                checkpoint_secs: secs,
                standby_secs: Some(secs),
                ..Default::default()
            };
            for elapsed in [0, 1, 2000, ten_years_ms] {
                assert!(!p.lifetime_over(elapsed), "{secs} {elapsed}");
                assert!(!p.idle_over(elapsed), "{secs} {elapsed}");
                assert!(!p.checkpoint_due(elapsed), "{secs} {elapsed}");
            }
            assert!(p.paused_expiry_ms(now) > now + ten_years_ms, "{secs}");
        }
        let p = LifecyclePolicy {
            idle_timeout_secs: 5,
            on_idle: OnIdle::Pause,
            paused_ttl_secs: 60,
            max_lifetime_secs: 30,
            checkpoint_secs: 10,
            standby_secs: None,
            ..Default::default()
        };
        assert!(!p.lifetime_over(29_999) && p.lifetime_over(30_000));
        assert!(!p.idle_over(4_999) && p.idle_over(5_000));
        assert!(!p.checkpoint_due(9_999) && p.checkpoint_due(10_000));
        assert_eq!(p.paused_expiry_ms(now), now + 60_000);
        let off = LifecyclePolicy {
            max_lifetime_secs: 0,
            checkpoint_secs: 0,
            on_idle: OnIdle::Nothing,
            ..p
        };
        assert!(!off.lifetime_over(i64::MAX) && !off.checkpoint_due(i64::MAX));
        assert!(!off.idle_over(i64::MAX));
    }

    #[test]
    fn non_objects_are_refused_at_every_level() {
        for (v, field) in [
            (json!([]), "manifest"),
            (json!([1, null, {}]), "manifest"),
            (json!(null), "manifest"),
            (json!("default"), "manifest"),
            (json!({"resources": []}), "resources"),
            (json!({"resources": [2.0, 512, 64, 0]}), "resources"),
            (json!({"lifecycle": []}), "lifecycle"),
            (json!({"lifecycle": [5, "pause"]}), "lifecycle"),
            (json!({"network": [["127.0.0.1:1"]]}), "network"),
            (json!({"env": [["A", "b"]]}), "env"),
            (json!({"mounts": [["/a", "/b"]]}), "mounts[0]"),
            (json!({"resources": "big"}), "resources"),
            (json!({"lifecycle": null}), "lifecycle"),
        ] {
            let e = Manifest::from_json(v.clone()).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidManifest, "{v}");
            assert_eq!(e.field.as_deref(), Some(field), "{v}: {e}");
        }
    }

    #[test]
    fn type_errors_name_their_field_in_one_readable_line() {
        for (v, field) in [
            (
                json!({"resources": {"memory_mb": -1}}),
                "resources.memory_mb",
            ),
            (
                json!({"resources": {"memory_mb": -256}}),
                "resources.memory_mb",
            ),
            (
                json!({"resources": {"memory_mb": 18446744073709551616.0}}),
                "resources.memory_mb",
            ),
            (
                json!({"resources": {"memory_mb": "x"}}),
                "resources.memory_mb",
            ),
            (
                json!({"resources": {"memory_mb": 1.5}}),
                "resources.memory_mb",
            ),
            (json!({"resources": {"pids": -5}}), "resources.pids"),
            (json!({"resources": {"disk_mb": -1}}), "resources.disk_mb"),
            (json!({"resources": {"cpus": "one"}}), "resources.cpus"),
            (
                json!({"lifecycle": {"idle_timeout_secs": -1}}),
                "lifecycle.idle_timeout_secs",
            ),
            (
                json!({"lifecycle": {"on_idle": "bogus"}}),
                "lifecycle.on_idle",
            ),
            (json!({"lifecycle": {"on_idle": 3}}), "lifecycle.on_idle"),
            (json!({"backend": "kvm"}), "backend"),
            (json!({"version": -1}), "version"),
            (json!({"image": 7}), "image"),
            (json!({"workdir": ["/w"]}), "workdir"),
            (json!({"env": {"A": 1}}), "env.A"),
            (json!({"mounts": [{"source": "/a"}]}), "mounts[0]"),
            (
                json!({"mounts": [{"source": 1, "target": "/b"}]}),
                "mounts[0].source",
            ),
            (json!({"outputs": [1]}), "outputs[0]"),
            (
                json!({"network": {"allow": "127.0.0.1:1"}}),
                "network.allow",
            ),
            (json!({"secrets": [null]}), "secrets[0]"),
        ] {
            let e = Manifest::from_json(v.clone()).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidManifest, "{v}");
            assert_eq!(e.field.as_deref(), Some(field), "{v}: {e}");
            assert!(e.message.starts_with(&format!("{field}: ")), "{v}: {e}");
            assert!(!e.message.contains('\n'), "{e}");
            assert!(!e.message.contains("expected u64"), "{e}");
        }
    }

    #[test]
    fn full_manifest_round_trips() {
        let m = Manifest::from_json(json!({
            "version": 1,
            "mounts": [{"source": "/srv/data", "target": "/input"}],
            "outputs": ["/workspace/out"],
            "network": {"allow": ["127.0.0.1:8080", "[::1]:443"]},
            "secrets": ["API_KEY"],
        }))
        .unwrap();
        assert_eq!(m.network.destinations().len(), 2);
        let back = Manifest::from_json(serde_json::to_value(&m).unwrap()).unwrap();
        assert_eq!(back, m);
        assert_eq!(back.digest(), m.digest());
    }

    #[test]
    fn digest_changes_with_content() {
        let a = Manifest::default();
        let mut b = Manifest::default();
        b.resources.memory_mb = 512;
        assert_ne!(a.digest(), b.digest());
        assert_eq!(a.digest(), Manifest::default().digest());
    }
}
