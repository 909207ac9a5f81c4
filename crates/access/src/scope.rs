//! What a token may do: its scopes, the one scope each route needs, and
//! the sandbox a per-sandbox token is limited to.
//!
//! | scope | allows |
//! |---|---|
//! | `read` | every `GET` of the tenant's objects (sandboxes, files, outputs, sessions' output, snapshots, runs, audit) |
//! | `exec` | running things inside sandboxes: exec, sessions and terminals, file writes, exposed ports, runs and their tool calls |
//! | `approve` | approving or rejecting a run's pending actions |
//! | `manage` | the sandbox lifecycle and the tenant's objects: create, pause, resume, snapshot, fork, restore, destroy, export, import, network policy, tokens |
//!
//! Every scope includes `read`. A token made before scopes existed (and an
//! admin token on the admin routes) has all of them. An approver token
//! (`approve`) can approve but not exec. A token with a sandbox is limited
//! to that sandbox's own routes (`/v1/sandboxes/{id}/...`), for instance
//! a terminal or port token handed to a browser.
//!
//! The route table is by method and route template (what the router
//! matched), so a new route falls under `manage` unless listed here: the
//! safe default.

use http::Method;
use serde::{Deserialize, Serialize};

use stasis_core::{Error, ErrorCode, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    Read,
    Exec,
    Approve,
    Manage,
}

impl Scope {
    pub const ALL: [Scope; 4] = [Scope::Read, Scope::Exec, Scope::Approve, Scope::Manage];

    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Read => "read",
            Scope::Exec => "exec",
            Scope::Approve => "approve",
            Scope::Manage => "manage",
        }
    }

    pub fn parse(s: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|x| x.as_str() == s)
    }

    fn bit(self) -> u8 {
        1 << (self as u8)
    }
}

/// A set of scopes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scopes(u8);

impl Scopes {
    pub fn all() -> Scopes {
        Scopes(Scope::ALL.iter().fold(0, |a, s| a | s.bit()))
    }

    /// Scopes named in a request (`field` names it in the error): known
    /// names, at least one.
    pub fn parse(names: &[String], field: &str) -> Result<Scopes> {
        if names.is_empty() {
            return Err(Error::invalid("at least one scope is needed").with_field(field));
        }
        let mut bits = 0;
        for n in names {
            let s = Scope::parse(n).ok_or_else(|| {
                Error::invalid(format!(
                    "unknown scope {n:?} (known: read, exec, approve, manage)"
                ))
                .with_field(field)
            })?;
            bits |= s.bit();
        }
        Ok(Scopes(bits))
    }

    /// The scopes of a stored token: `None` (made before scopes) is all.
    /// Names this daemon does not know are ignored (never widen).
    pub fn from_stored(names: Option<&[String]>) -> Scopes {
        match names {
            None => Scopes::all(),
            Some(v) => Scopes(
                v.iter()
                    .filter_map(|n| Scope::parse(n))
                    .fold(0, |a, s| a | s.bit()),
            ),
        }
    }

    /// Whether `s` is allowed (every scope includes `read`).
    pub fn allows(self, s: Scope) -> bool {
        self.0 & s.bit() != 0 || (s == Scope::Read && self.0 != 0)
    }

    pub fn contains_all(self, other: Scopes) -> bool {
        other.0 & !self.0 == 0
    }

    pub fn names(self) -> Vec<String> {
        Scope::ALL
            .into_iter()
            .filter(|s| self.0 & s.bit() != 0)
            .map(|s| s.as_str().to_string())
            .collect()
    }
}

/// What a route needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// An admin route: the admin extractor decides.
    Admin,
    /// A tenant route needing this scope.
    Tenant(Scope),
}

/// The scope a route needs, by method and route template.
pub fn need(method: &Method, template: &str) -> Need {
    if template.starts_with("/v1/admin/") || template == "/v1/admin" {
        return Need::Admin;
    }
    let read = matches!(*method, Method::GET | Method::HEAD);
    let scope = if template.ends_with("/approve") || template.ends_with("/reject") {
        Scope::Approve
    } else if template.starts_with("/v1/snapshots/{id}/export") {
        // The whole snapshot leaves the daemon: more than a read.
        Scope::Manage
    } else if template.contains("/ports/")
        || template.ends_with("/attach")
        || template.starts_with("/v1/sandboxes/{id}/terminal")
    {
        // Proxied traffic and terminals act inside the sandbox, whatever
        // the method.
        Scope::Exec
    } else if read {
        Scope::Read
    } else if template.starts_with("/v1/runs")
        || template.starts_with("/v1/sandboxes/{id}/exec")
        || template.starts_with("/v1/sandboxes/{id}/sessions")
        || template.starts_with("/v1/sandboxes/{id}/files")
    {
        Scope::Exec
    } else {
        Scope::Manage
    };
    Need::Tenant(scope)
}

/// The sandbox id of a request under `/v1/sandboxes/{id}`, from its path.
pub fn sandbox_of<'a>(template: &str, path: &'a str) -> Option<&'a str> {
    let t = template.strip_prefix("/v1/sandboxes/{id}")?;
    if !(t.is_empty() || t.starts_with('/')) {
        return None;
    }
    path.strip_prefix("/v1/sandboxes/")?.split('/').next()
}

/// Whether a tenant token with `scopes`, limited to `sandbox` if any, may
/// make this request: 403 naming what is missing if not.
pub fn permit(
    scopes: Scopes,
    sandbox: Option<&str>,
    method: &Method,
    template: &str,
    path: &str,
) -> Result<()> {
    let Need::Tenant(scope) = need(method, template) else {
        return Ok(());
    };
    if let Some(only) = sandbox {
        if sandbox_of(template, path) != Some(only) {
            return Err(Error::new(
                ErrorCode::Forbidden,
                format!("this token is limited to sandbox {only}"),
            ));
        }
    }
    if !scopes.allows(scope) {
        return Err(Error::new(
            ErrorCode::Forbidden,
            format!(
                "this token lacks the {:?} scope this route needs (it has: {})",
                scope.as_str(),
                scopes.names().join(", ")
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(names: &[&str]) -> Scopes {
        Scopes::parse(
            &names.iter().map(|x| x.to_string()).collect::<Vec<_>>(),
            "scopes",
        )
        .unwrap()
    }

    #[test]
    fn routes_need_the_scope_of_what_they_do() {
        let cases = [
            (Method::GET, "/v1/sandboxes", Scope::Read),
            (Method::GET, "/v1/sandboxes/{id}/files", Scope::Read),
            (Method::GET, "/v1/audit", Scope::Read),
            (Method::POST, "/v1/sandboxes/{id}/exec", Scope::Exec),
            (Method::POST, "/v1/sandboxes/{id}/exec/stream", Scope::Exec),
            (Method::PUT, "/v1/sandboxes/{id}/files", Scope::Exec),
            (
                Method::POST,
                "/v1/sandboxes/{id}/sessions/{session}/input",
                Scope::Exec,
            ),
            (
                Method::GET,
                "/v1/sandboxes/{id}/sessions/{session}/attach",
                Scope::Exec,
            ),
            (
                Method::GET,
                "/v1/sandboxes/{id}/ports/{port}/{*path}",
                Scope::Exec,
            ),
            (Method::POST, "/v1/runs/{id}/tool-calls", Scope::Exec),
            (
                Method::POST,
                "/v1/runs/{id}/approvals/{call}/approve",
                Scope::Approve,
            ),
            (
                Method::POST,
                "/v1/runs/{id}/approvals/{call}/reject",
                Scope::Approve,
            ),
            (Method::POST, "/v1/sandboxes", Scope::Manage),
            (Method::DELETE, "/v1/sandboxes/{id}", Scope::Manage),
            (Method::POST, "/v1/sandboxes/{id}/pause", Scope::Manage),
            (Method::GET, "/v1/snapshots/{id}/export", Scope::Manage),
            (Method::POST, "/v1/tokens", Scope::Manage),
            (
                Method::PATCH,
                "/v1/sandboxes/{id}/something-new",
                Scope::Manage,
            ),
        ];
        for (m, t, want) in cases {
            assert_eq!(need(&m, t), Need::Tenant(want), "{m} {t}");
        }
        assert_eq!(need(&Method::POST, "/v1/admin/tenants"), Need::Admin);
    }

    #[test]
    fn an_approver_approves_but_does_not_exec() {
        let a = s(&["approve"]);
        let ok = |m: Method, t: &str, p: &str| permit(a, None, &m, t, p);
        ok(
            Method::POST,
            "/v1/runs/{id}/approvals/{call}/approve",
            "/v1/runs/r/approvals/c/approve",
        )
        .unwrap();
        ok(Method::GET, "/v1/runs/{id}", "/v1/runs/r").unwrap();
        let e = ok(
            Method::POST,
            "/v1/sandboxes/{id}/exec",
            "/v1/sandboxes/x/exec",
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::Forbidden);
        assert!(e.message.contains("\"exec\""), "{e}");
        // And an exec token does not approve.
        let e = permit(
            s(&["exec"]),
            None,
            &Method::POST,
            "/v1/runs/{id}/approvals/{call}/reject",
            "/v1/runs/r/approvals/c/reject",
        )
        .unwrap_err();
        assert_eq!(e.code, ErrorCode::Forbidden);
        // Read-only reads and nothing else.
        let r = s(&["read"]);
        permit(
            r,
            None,
            &Method::GET,
            "/v1/sandboxes/{id}",
            "/v1/sandboxes/x",
        )
        .unwrap();
        assert!(permit(
            r,
            None,
            &Method::POST,
            "/v1/sandboxes/{id}/pause",
            "/v1/sandboxes/x/pause"
        )
        .is_err());
    }

    #[test]
    fn a_sandbox_token_reaches_only_its_sandbox() {
        let t = s(&["exec"]);
        let only = Some("sbx-a");
        permit(
            t,
            only,
            &Method::GET,
            "/v1/sandboxes/{id}/ports/{port}/{*path}",
            "/v1/sandboxes/sbx-a/ports/80/x",
        )
        .unwrap();
        permit(
            t,
            only,
            &Method::POST,
            "/v1/sandboxes/{id}/exec",
            "/v1/sandboxes/sbx-a/exec",
        )
        .unwrap();
        for (m, tpl, p) in [
            (
                Method::POST,
                "/v1/sandboxes/{id}/exec",
                "/v1/sandboxes/sbx-b/exec",
            ),
            (Method::GET, "/v1/sandboxes", "/v1/sandboxes"),
            (Method::GET, "/v1/snapshots", "/v1/snapshots"),
            (Method::GET, "/v1/runs/{id}", "/v1/runs/r"),
        ] {
            let e = permit(t, only, &m, tpl, p).unwrap_err();
            assert_eq!(e.code, ErrorCode::Forbidden, "{tpl}");
            assert!(e.message.contains("sbx-a"), "{e}");
        }
    }

    #[test]
    fn scope_sets() {
        assert!(Scopes::all().contains_all(s(&["exec", "manage"])));
        assert!(!s(&["exec"]).contains_all(s(&["exec", "manage"])));
        assert!(s(&["approve"]).allows(Scope::Read));
        assert!(!s(&["approve"]).allows(Scope::Exec));
        assert_eq!(Scopes::from_stored(None), Scopes::all());
        // Unknown stored names never widen a token.
        let v = vec!["root".to_string(), "read".to_string()];
        assert_eq!(Scopes::from_stored(Some(&v)), s(&["read"]));
        assert_eq!(Scopes::from_stored(Some(&[])).names(), Vec::<String>::new());
        assert!(!Scopes::from_stored(Some(&[])).allows(Scope::Read));
        for bad in [vec![], vec!["root".to_string()]] {
            let e = Scopes::parse(&bad, "scopes").unwrap_err();
            assert_eq!(e.field.as_deref(), Some("scopes"));
        }
        assert_eq!(s(&["manage", "read"]).names(), vec!["read", "manage"]);
    }

    #[test]
    fn the_sandbox_of_a_path() {
        assert_eq!(
            sandbox_of("/v1/sandboxes/{id}", "/v1/sandboxes/a"),
            Some("a")
        );
        assert_eq!(
            sandbox_of("/v1/sandboxes/{id}/exec", "/v1/sandboxes/a/exec"),
            Some("a")
        );
        assert_eq!(sandbox_of("/v1/sandboxes", "/v1/sandboxes"), None);
        assert_eq!(sandbox_of("/v1/sandboxes/{idx}", "/v1/sandboxes/a"), None);
        assert_eq!(sandbox_of("/v1/snapshots/{id}", "/v1/snapshots/a"), None);
    }
}
