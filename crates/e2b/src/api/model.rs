//! What the E2B SDKs send and parse on the control plane, as they spell it
//! (`spec/openapi.yml` of e2b-dev/E2B and the generated clients of the
//! pinned SDKs). Requests refuse unknown fields: a field this edge does not
//! know is a setting it would otherwise drop silently.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `POST /sandboxes`, `POST /v2/sandboxes`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NewSandbox {
    #[serde(rename = "templateID")]
    pub template_id: String,
    /// Seconds the sandbox lives (its running time; see the manual).
    pub timeout: Option<u64>,
    pub auto_pause: Option<bool>,
    pub auto_pause_memory: Option<bool>,
    pub auto_resume: Option<AutoResume>,
    /// Always on: every sandbox's data plane needs its access token.
    pub secure: Option<bool>,
    #[serde(rename = "allow_internet_access")]
    pub allow_internet_access: Option<bool>,
    pub network: Option<NetworkConfig>,
    pub metadata: Option<BTreeMap<String, String>>,
    pub env_vars: Option<BTreeMap<String, String>>,
    pub mcp: Option<serde_json::Value>,
    pub iam: Option<serde_json::Value>,
    pub volume_mounts: Option<serde_json::Value>,
}

#[derive(Debug, Clone, Copy, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct AutoResume {
    pub enabled: bool,
}

/// The sandbox's egress as E2B names it (create and `PUT .../network`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NetworkConfig {
    pub allow_out: Option<Vec<String>>,
    pub deny_out: Option<Vec<String>>,
    pub allow_public_traffic: Option<bool>,
    pub mask_request_host: Option<String>,
    pub rules: Option<serde_json::Value>,
    pub egress_proxy: Option<serde_json::Value>,
    pub dns_servers: Option<Vec<String>>,
    pub https_ports: Option<Vec<u16>>,
    /// Only in `PUT .../network`.
    #[serde(rename = "allow_internet_access", alias = "allowInternetAccess")]
    pub allow_internet_access: Option<bool>,
}

/// `POST /v2/sandboxes/{id}/connect`, `POST /sandboxes/{id}/connect`,
/// `POST /sandboxes/{id}/resume`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Connect {
    pub timeout: Option<u64>,
    /// false: resume by cold boot (the SDK's `on_resume="reboot"`).
    pub memory: Option<bool>,
    /// `/resume`'s deprecated field.
    pub auto_pause: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Timeout {
    pub timeout: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Pause {
    pub memory: Option<bool>,
    pub require_healthy_guest: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnapshotRequest {
    pub name: Option<String>,
    pub memory: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    pub timeout: Option<u64>,
    pub count: Option<u32>,
}

/// What create, connect and fork answer (`Sandbox` in the spec).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Created {
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    #[serde(rename = "templateID")]
    pub template_id: String,
    #[serde(rename = "clientID")]
    pub client_id: String,
    pub envd_version: String,
    pub envd_access_token: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Lifecycle {
    pub on_timeout: &'static str,
    pub auto_resume: bool,
}

/// `GET /sandboxes/{id}` (`SandboxDetail`) and, without the detail-only
/// fields, one entry of a listing (`ListedSandbox`).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Detail {
    #[serde(rename = "sandboxID")]
    pub sandbox_id: String,
    #[serde(rename = "templateID")]
    pub template_id: String,
    #[serde(rename = "clientID")]
    pub client_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alias: Option<String>,
    /// RFC 3339.
    pub started_at: String,
    pub end_at: String,
    pub state: &'static str,
    pub cpu_count: u32,
    #[serde(rename = "memoryMB")]
    pub memory_mb: u64,
    #[serde(rename = "diskSizeMB")]
    pub disk_size_mb: u64,
    pub envd_version: String,
    pub metadata: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub envd_access_token: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow_internet_access: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lifecycle: Option<Lifecycle>,
}

/// One sample of `GET /sandboxes/{id}/metrics`.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Metric {
    pub cpu_count: u32,
    pub cpu_used_pct: f64,
    pub mem_used: u64,
    pub mem_total: u64,
    pub mem_cache: u64,
    pub disk_used: u64,
    pub disk_total: u64,
    /// RFC 3339 and seconds since the epoch.
    pub timestamp: String,
    pub timestamp_unix: i64,
}

/// `POST /sandboxes/{id}/snapshots`, `GET /snapshots`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SnapshotInfo {
    #[serde(rename = "snapshotID")]
    pub snapshot_id: String,
    pub names: Vec<String>,
}

/// One entry of a fork's answer.
#[derive(Debug, Clone, Serialize)]
pub struct ForkResult {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Created>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<super::error::Body>,
}
