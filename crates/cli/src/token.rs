//! `stasis token`: a tenant's own API tokens (needs the `manage` scope):
//! scoped, expiring or per-sandbox tokens, rotation with an overlap,
//! revocation, the list.

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use stasis_core::{Error, Result};

use crate::client::{path_seg, Client};
use crate::output::print_value;

/// What a new token may do and for how long (`token create`, `admin token create`).
#[derive(Args)]
pub struct MintArgs {
    /// read, exec, approve or manage (repeat for several; default: all the minter may give).
    #[arg(long = "scope")]
    pub scopes: Vec<String>,
    /// Lifetime, e.g. 90m, 12h, 30d (default: no expiry, or the minter's).
    #[arg(long)]
    pub ttl: Option<String>,
    /// Limit the token to this sandbox.
    #[arg(long)]
    pub sandbox: Option<String>,
}

#[derive(Subcommand)]
pub enum TokenCmd {
    /// Mint a token; prints it once.
    Create {
        /// What the token is for.
        name: String,
        #[command(flatten)]
        mint: MintArgs,
    },
    /// List this tenant's tokens (never their text).
    Ls,
    /// Revoke a token by its id (tok-...).
    Revoke { id: String },
    /// Replace a token by a new one; the old one keeps working for the overlap.
    Rotate {
        id: String,
        /// How long the old token stays valid, e.g. 10m (default 10m; 0s ends it now).
        #[arg(long)]
        overlap: Option<String>,
    },
}

/// Seconds of a human duration ("90m", "12h", "1d 2h").
pub fn secs(flag: &str, s: &str) -> Result<u64> {
    humantime::parse_duration(s)
        .map(|d| d.as_secs())
        .map_err(|e| Error::invalid(format!("{flag} {s:?}: {e} (e.g. 90s, 10m, 12h, 30d)")))
}

/// The body of a token mint.
pub fn mint_body(name: &str, m: &MintArgs) -> Result<Value> {
    let mut b = json!({ "name": name });
    if !m.scopes.is_empty() {
        b["scopes"] = json!(m.scopes);
    }
    if let Some(t) = &m.ttl {
        b["ttl_secs"] = json!(secs("--ttl", t)?);
    }
    if let Some(s) = &m.sandbox {
        b["sandbox"] = json!(s);
    }
    Ok(b)
}

/// One line per token: id, name, scopes, expiry, state.
pub fn token_lines(v: &Value) -> String {
    v.as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            let scopes = t["scopes"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_else(|| "all".into());
            let mut line = format!(
                "{}  {}  [{scopes}]",
                t["id"].as_str().unwrap_or("?"),
                t["name"].as_str().unwrap_or("")
            );
            if let Some(s) = t["sandbox"].as_str() {
                line.push_str(&format!("  sandbox={s}"));
            }
            if let Some(e) = t["expires_at_ms"].as_i64() {
                line.push_str(&format!("  expires_at_ms={e}"));
            }
            if t["revoked_at_ms"].is_i64() {
                line.push_str("  (revoked)");
            }
            line
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Print a freshly minted token (its text once, on stdout).
pub fn print_minted(json: bool, v: &Value) {
    print_value(json, v, |v| v["token"].as_str().unwrap_or("?").to_string());
    if !json {
        eprintln!(
            "stasis: token {}: shown once, store it now",
            v["id"].as_str().unwrap_or("?")
        );
    }
}

/// `stasis token`.
pub async fn token(c: &Client, cmd: TokenCmd, json: bool) -> Result<()> {
    match cmd {
        TokenCmd::Create { name, mint } => {
            let body = mint_body(&name, &mint)?;
            let v = c.post("/v1/tokens", body).await?;
            print_minted(json, &v);
        }
        TokenCmd::Ls => {
            let v = c.get("/v1/tokens").await?;
            print_value(json, &v, token_lines);
        }
        TokenCmd::Revoke { id } => {
            let v = c.delete(&format!("/v1/tokens/{}", path_seg(&id)?)).await?;
            print_value(json, &v, |v| {
                format!("revoked {}", v["id"].as_str().unwrap_or("?"))
            });
        }
        TokenCmd::Rotate { id, overlap } => {
            let mut body = json!({});
            if let Some(o) = overlap {
                body["overlap_secs"] = json!(secs("--overlap", &o)?);
            }
            let v = c
                .post(&format!("/v1/tokens/{}/rotate", path_seg(&id)?), body)
                .await?;
            print_minted(json, &v);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_bodies() {
        assert_eq!(secs("--ttl", "90m").unwrap(), 5400);
        assert_eq!(secs("--ttl", "1d 2h").unwrap(), 93_600);
        let e = secs("--ttl", "soon").unwrap_err();
        assert!(e.message.contains("--ttl"), "{e}");
        let m = MintArgs {
            scopes: vec!["exec".into()],
            ttl: Some("1h".into()),
            sandbox: Some("sb-a".into()),
        };
        let b = mint_body("ci", &m).unwrap();
        assert_eq!(
            b,
            json!({"name": "ci", "scopes": ["exec"], "ttl_secs": 3600, "sandbox": "sb-a"})
        );
        let none = MintArgs {
            scopes: vec![],
            ttl: None,
            sandbox: None,
        };
        assert_eq!(mint_body("x", &none).unwrap(), json!({"name": "x"}));
    }
}
