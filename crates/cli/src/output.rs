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
