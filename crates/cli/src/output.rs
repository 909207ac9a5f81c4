//! How a command prints its result: pretty JSON with `--json`, else a text
//! rendering of the same value. Typed answers print through
//! `serde_json::Value`, so their keys come out in the order the raw server
//! JSON always printed in (sorted), with the server's own skips.

use serde::Serialize;
use serde_json::Value;

pub fn print_value<T: Serialize>(json: bool, v: &T, text: impl FnOnce(&T) -> String) {
    if json {
        println!("{}", pretty(v));
    } else {
        println!("{}", text(v));
    }
}

/// `v` as pretty JSON, keys sorted as in a `serde_json::Value`.
pub fn pretty<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .and_then(|v| serde_json::to_string_pretty(&v))
        .unwrap_or_default()
}

/// `v` as compact JSON, keys sorted (a number, a quoted string, `null`, an
/// object on one line), as raw server JSON printed with `{}`.
pub fn compact<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .map(|v: Value| v.to_string())
        .unwrap_or_default()
}

/// A unit enum as the API spells it (`file`, `pause`, `process`, ...): the
/// string it serializes to, unquoted.
pub fn as_text<T: Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use stasis_server::http::exec::ExecStreamLine;
    use stasis_server::http::sandboxes::Sandbox;
    use stasis_server::OpTiming;

    fn sandbox() -> Sandbox {
        Sandbox {
            id: "sb-1".into(),
            state: "paused".into(),
            backend: "process".into(),
            reason: None,
            manifest: stasis_core::Manifest::default(),
            manifest_version: 1,
            manifest_digest: "d".into(),
            created_at_ms: 1,
            running_ms: 2,
            paused_at_ms: Some(3),
            expires_at_ms: None,
            pause_kind: Some("memory".into()),
            pause_snapshot: Some("snap-1".into()),
            source_snapshot: None,
            checkpoint_snapshot: None,
            checkpoint_at_ms: None,
            recovered_from_snapshot: None,
            recovered_at_ms: None,
            progress_lost_ms: None,
            node: None,
            standby: Some(stasis_backend::Standby {
                ram_bytes: 4,
                since_ms: 5,
                until_ms: 6,
            }),
            labels: Default::default(),
            timing: Some(OpTiming {
                backend_ms: 1,
                store_ms: 2,
                total_ms: 3,
                breakdown: [("qemu_start_ms".to_string(), 4)].into(),
            }),
        }
    }

    /// What the server sends, decoded once as the typed answer and once as
    /// raw JSON, prints the same.
    fn same_as_raw<T: Serialize + serde::de::DeserializeOwned>(sent: &T) {
        let wire = serde_json::to_string(sent).unwrap();
        let raw: Value = serde_json::from_str(&wire).unwrap();
        let typed: T = serde_json::from_str(&wire).unwrap();
        assert_eq!(pretty(&typed), serde_json::to_string_pretty(&raw).unwrap());
        assert_eq!(compact(&typed), raw.to_string());
    }

    #[test]
    fn typed_answers_print_as_the_raw_json_did() {
        same_as_raw(&sandbox());
        same_as_raw(&ExecStreamLine::Exit {
            exit_code: None,
            signal: Some(9),
            timed_out: true,
            truncated: false,
            duration_ms: 5,
        });
        // Keys sorted, skipped fields absent, as in a serde_json::Value.
        let p = pretty(&sandbox());
        assert!(p.find("\"backend\"").unwrap() < p.find("\"id\"").unwrap());
        assert!(!p.contains("\"reason\""));
    }

    #[test]
    fn texts_of_scalars_and_enums() {
        assert_eq!(compact(&None::<u64>), "null");
        assert_eq!(compact(&Some(7u64)), "7");
        assert_eq!(compact(&vec!["sh", "-c"]), r#"["sh","-c"]"#);
        assert_eq!(as_text(&stasis_core::FileKind::Dir), "dir");
        assert_eq!(as_text(&stasis_server::SnapshotKind::Pause), "pause");
    }
}
