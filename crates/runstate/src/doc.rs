//! The RunState document: what `GET /v1/runs/{id}/state` returns and
//! `POST /v1/runs/resume` accepts.
//!
//! ```json
//! {"format": "stasis.runstate", "version": 1, "key_id": "…16 hex…",
//!  "state": {"backend_id": "stasis", "run": {…}, "sandbox": {"id", "manifest_digest"},
//!            "pending_approvals": ["call-…"], "issued_at_ms": …},
//!  "mac": "…64 hex…"}
//! ```
//!
//! `mac` is HMAC-SHA256 under the server's run-state key over the canonical
//! JSON (object keys sorted, no whitespace) of every other top-level field,
//! so a client may store the document in any JSON store that reorders keys.
//! A document of another format or version is refused before its MAC is
//! looked at; a changed byte anywhere in `state` is refused as an integrity
//! error. The document carries no secrets: exec environment values are never
//! recorded (only their names), and credentials are re-injected from the
//! sandbox's manifest in force when a call executes.

use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use stasis_core::{Error, Result};

use crate::{Run, RunKey};

pub const FORMAT: &str = "stasis.runstate";
pub const STATE_VERSION: u64 = 1;

/// What the sandbox of a run was when the document was issued.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxBinding {
    pub id: String,
    pub manifest_digest: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateBody {
    /// Like the agent SDK's `backend_id`: a resume on another kind of backend is refused.
    pub backend_id: String,
    pub run: Run,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxBinding>,
    /// Calls waiting for a human decision when the document was issued.
    #[serde(default)]
    pub pending_approvals: Vec<String>,
    pub issued_at_ms: i64,
}

/// The document as sent over the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StateDocument {
    pub format: String,
    pub version: u64,
    pub key_id: String,
    pub state: serde_json::Value,
    pub mac: String,
}

pub const BACKEND_ID: &str = "stasis";

/// JSON with object keys sorted at every level and no whitespace.
pub fn canonical_json(v: &serde_json::Value) -> String {
    let mut out = String::new();
    write_canonical(v, &mut out);
    out
}

fn write_canonical(v: &serde_json::Value, out: &mut String) {
    match v {
        serde_json::Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k).expect("string serializes"));
                out.push(':');
                write_canonical(&m[k.as_str()], out);
            }
            out.push('}');
        }
        serde_json::Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&serde_json::to_string(other).expect("scalar serializes")),
    }
}

fn signed_bytes(format: &str, version: u64, key_id: &str, state: &serde_json::Value) -> String {
    canonical_json(&serde_json::json!({
        "format": format,
        "version": version,
        "key_id": key_id,
        "state": state,
    }))
}

fn mac(key: &RunKey) -> Hmac<Sha256> {
    <Hmac<Sha256> as Mac>::new_from_slice(key.bytes()).expect("HMAC takes any key length")
}

/// Sign a state body into a document.
pub fn sign_state(body: &StateBody, key: &RunKey) -> StateDocument {
    let state = serde_json::to_value(body).expect("state serializes");
    let key_id = key.id();
    let mut m = mac(key);
    m.update(signed_bytes(FORMAT, STATE_VERSION, &key_id, &state).as_bytes());
    StateDocument {
        format: FORMAT.into(),
        version: STATE_VERSION,
        key_id,
        state,
        mac: hex::encode(m.finalize().into_bytes()),
    }
}

/// Check a document from a client: format, version, key, MAC (constant
/// time), then the body's shape. Tampering is an `integrity_error`; another
/// format or version is an `invalid_argument` naming the field.
pub fn verify_state(doc: &serde_json::Value, key: &RunKey) -> Result<StateBody> {
    let obj = doc
        .as_object()
        .ok_or_else(|| Error::invalid("a run state document is a JSON object"))?;
    match obj.get("format").and_then(|f| f.as_str()) {
        Some(FORMAT) => {}
        other => {
            return Err(Error::invalid(format!(
                "not a stasis run state document (format {other:?})"
            ))
            .with_field("format"))
        }
    }
    match obj.get("version").and_then(|v| v.as_u64()) {
        Some(STATE_VERSION) => {}
        other => {
            return Err(Error::invalid(format!(
                "unsupported run state version {:?}; this daemon reads version {STATE_VERSION}",
                other.map(|v| v.to_string()).unwrap_or_else(|| obj
                    .get("version")
                    .map(|v| v.to_string())
                    .unwrap_or_default())
            ))
            .with_field("version"))
        }
    }
    let d: StateDocument = serde_json::from_value(doc.clone())
        .map_err(|e| Error::integrity(format!("run state document malformed: {e}")))?;
    if d.key_id != key.id() {
        return Err(Error::integrity(
            "run state document was signed with another key (another daemon, or the key was rotated)",
        ));
    }
    let tag =
        hex::decode(&d.mac).map_err(|_| Error::integrity("run state document's mac is not hex"))?;
    let mut m = mac(key);
    m.update(signed_bytes(&d.format, d.version, &d.key_id, &d.state).as_bytes());
    m.verify_slice(&tag).map_err(|_| {
        Error::integrity("run state document failed its integrity check (tampered)")
    })?;
    let body: StateBody = serde_json::from_value(d.state)
        .map_err(|e| Error::integrity(format!("run state body malformed: {e}")))?;
    if body.backend_id != BACKEND_ID {
        return Err(Error::invalid(format!(
            "run state is for backend {:?}, not {BACKEND_ID:?}",
            body.backend_id
        ))
        .with_field("state.backend_id"));
    }
    Ok(body)
}
