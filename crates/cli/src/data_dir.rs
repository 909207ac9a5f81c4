//! Where this machine's stasis data lives, and the API token a client
//! command sends when none is given.

use std::path::PathBuf;

/// The token a client command sends: `--token`/`STASIS_TOKEN`, else the
/// token file of the local data dir (absent: no header, and the daemon's
/// 401 says what to do).
pub fn client_token(explicit: Option<&str>, admin: bool) -> Option<String> {
    if let Some(t) = explicit {
        return Some(t.to_string());
    }
    let dir = match std::env::var_os("STASIS_DATA_DIR") {
        Some(d) => PathBuf::from(d),
        None => default_data_dir(),
    };
    let file = dir.join(if admin { "admin.token" } else { "token" });
    std::fs::read_to_string(file).ok()
}

pub fn default_data_dir() -> PathBuf {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/lib"));
    home.join(".local/share/stasis")
}
