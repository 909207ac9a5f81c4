//! How a command prints its result: pretty JSON with `--json`, else a text
//! rendering of the same value.

use serde_json::Value;

pub fn print_value(json: bool, v: &Value, text: impl FnOnce(&Value) -> String) {
    if json {
        println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
    } else {
        println!("{}", text(v));
    }
}
