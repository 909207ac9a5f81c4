//! Refusals in E2B's shape: `{"code": <HTTP status>, "message": "..."}`,
//! which the SDKs turn into their own exceptions (`NotFoundException`,
//! `AuthenticationException`, `InvalidArgumentException`, ...). stasis's
//! error codes map to statuses as on `/v1`, except that what stasis does not
//! support is a 400 with a message that says so (E2B's SDKs give a 501 no
//! meaning), and another tenant's sandbox is "not found" (the control plane
//! already answers so).

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use stasis_core::{Error, ErrorCode};

#[derive(Debug, Clone, Serialize)]
pub struct Body {
    pub code: u16,
    pub message: String,
}

/// An error answered in E2B's shape.
#[derive(Debug)]
pub struct E2bError(pub Error);

pub type E2bResult<T> = std::result::Result<T, E2bError>;

impl From<Error> for E2bError {
    fn from(e: Error) -> Self {
        E2bError(e)
    }
}

/// The status E2B's SDKs should see for a stasis error.
pub fn status_of(code: ErrorCode) -> u16 {
    match code {
        ErrorCode::Unsupported => 400,
        c => c.http_status(),
    }
}

/// The E2B body of a stasis error.
pub fn body_of(e: &Error) -> Body {
    let message = match &e.field {
        Some(f) if !e.message.contains(f.as_str()) => format!("{f}: {}", e.message),
        _ => e.message.clone(),
    };
    Body {
        code: status_of(e.code),
        message,
    }
}

impl IntoResponse for E2bError {
    fn into_response(self) -> Response {
        let body = body_of(&self.0);
        let status = StatusCode::from_u16(body.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if status.is_server_error() {
            tracing::warn!(error = %self.0.message, "e2b edge error");
        }
        (status, axum::Json(body)).into_response()
    }
}

/// What stasis does not offer, refused before anything is created.
pub fn unsupported(what: &str) -> E2bError {
    E2bError(Error::new(
        ErrorCode::Unsupported,
        format!("{what} is not supported by this server (stasis); see the E2B chapter of the stasis manual"),
    ))
}

/// A request body that is not what the route takes.
pub fn bad_body(why: impl std::fmt::Display) -> E2bError {
    E2bError(Error::invalid(format!("invalid request body: {why}")))
}

/// Unknown paths under the edge: E2B-shaped, never the daemon's own shape.
pub async fn fallback(req: axum::extract::Request) -> E2bError {
    E2bError(Error::new(
        ErrorCode::NotFound,
        format!(
            "no such E2B endpoint: {} {}",
            req.method(),
            req.uri().path()
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn errors_are_e2b_shaped_with_the_status_as_code() {
        for (e, status) in [
            (Error::not_found("sandbox sb-1 not found"), 404),
            (Error::invalid("bad"), 400),
            (Error::unsupported("mcp"), 400),
            (Error::state("sandbox is paused"), 409),
            (stasis_access::auth::unauthorized("no key"), 401),
        ] {
            let resp = E2bError(e).into_response();
            assert_eq!(resp.status().as_u16(), status);
            let bytes = axum::body::to_bytes(resp.into_body(), 4096).await.unwrap();
            let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            assert_eq!(v["code"], status);
            assert!(v["message"].as_str().is_some_and(|m| !m.is_empty()));
        }
        let b = body_of(&Error::invalid("must be positive").with_field("timeout"));
        assert_eq!(b.message, "timeout: must be positive");
    }
}
