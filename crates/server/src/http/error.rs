//! Errors and extractors of the HTTP edge. [`ApiError`] renders a stasis
//! error as `{"error": {"code", "message", "field"?}}` with the status its
//! code maps to; the body and query extractors ([`ApiJson`], [`ApiBytes`],
//! [`ApiQuery`]) reject with it; `json_errors` rewrites axum's own
//! plain-text rejections and `fallback` answers an unknown endpoint.

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, QueryRejection};
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::{request::Parts, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use utoipa::ToSchema;

use stasis_core::{Error, ErrorCode};

/// An API error: a stasis error rendered as JSON with its HTTP status.
pub struct ApiError(pub Error);

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError(e)
    }
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable machine-readable code, e.g. `not_found`, `invalid_state`.
    pub code: String,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.0.code.as_str().to_string(),
                message: self.0.message,
                field: self.0.field,
            },
        };
        let mut resp = (status, axum::Json(body)).into_response();
        if matches!(self.0.code, ErrorCode::Overloaded | ErrorCode::Unavailable) {
            resp.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(crate::inflight::RETRY_AFTER_SECS),
            );
        }
        resp
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// JSON body extractor whose rejections are API errors.
pub struct ApiJson<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        if !json_content_type(req.headers()) {
            return Err(ApiError(Error::invalid(
                "expected a JSON body with content-type application/json",
            )));
        }
        let body = Bytes::from_request(req, state)
            .await
            .map_err(|r| ApiError(bytes_rejection(r)))?;
        require_object(&body)?;
        Ok(ApiJson(strict_json(&body)?))
    }
}

/// A JSON object body as `T`: syntax errors as `invalid_argument`; type and
/// shape errors name the field (non-objects refused at every level).
fn strict_json<T: DeserializeOwned>(body: &[u8]) -> ApiResult<T> {
    let v: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| ApiError(Error::invalid(format!("the request body is not JSON: {e}"))))?;
    Ok(stasis_core::strict::from_value(
        v,
        ErrorCode::InvalidArgument,
        "body",
    )?)
}

/// `application/json` or any `application/...+json`, parameters ignored:
/// the rule of axum's `Json` extractor, which keeps its check private; the
/// body is read as bytes first so that it can be checked to be an object.
fn json_content_type(headers: &axum::http::HeaderMap) -> bool {
    let Some(value) = headers
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

fn bytes_rejection(r: BytesRejection) -> Error {
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        Error::new(
            ErrorCode::PayloadTooLarge,
            "request body exceeds the configured limit",
        )
    } else {
        Error::invalid(r.body_text())
    }
}

/// Raw body extractor with API errors (413 for oversized bodies).
pub struct ApiBytes(pub Bytes);

impl<S: Send + Sync> FromRequest<S> for ApiBytes {
    type Rejection = ApiError;
    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        Bytes::from_request(req, state)
            .await
            .map(ApiBytes)
            .map_err(|r| ApiError(bytes_rejection(r)))
    }
}

/// Query extractor with API errors.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Query::<T>::from_request_parts(parts, state)
            .await
            .map(|Query(v)| ApiQuery(v))
            .map_err(|r: QueryRejection| ApiError(Error::invalid(r.body_text())))
    }
}

/// Every request body is a JSON object. serde's derived structs would also
/// take a JSON array as their fields in order, so `[]` would pass as a
/// request whose fields all have defaults.
fn require_object(body: &[u8]) -> ApiResult<()> {
    if body.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{') {
        Ok(())
    } else {
        Err(ApiError(Error::invalid(
            "the request body must be a JSON object",
        )))
    }
}

/// A body that may be empty (then `T::default()`) or else a JSON object.
pub(crate) fn optional_json<T: DeserializeOwned + Default>(body: &Bytes) -> ApiResult<T> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(T::default());
    }
    require_object(body)?;
    strict_json(body)
}

/// Every error leaves as JSON: rejections produced by axum itself (a path
/// segment that is not UTF-8, a method the route does not have, ...) come
/// as plain text and are rewritten here, keeping their status.
pub(crate) async fn json_errors(resp: Response) -> Response {
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    // A sandbox server's own answer, relayed by the port proxy.
    if resp.extensions().get::<Relayed>().is_some() {
        return resp;
    }
    let is_json = resp
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if is_json {
        return resp;
    }
    let (parts, body) = resp.into_parts();
    let text = axum::body::to_bytes(body, 4096).await.unwrap_or_default();
    let mut message = String::from_utf8_lossy(&text).trim().to_string();
    if message.is_empty() {
        message = status.canonical_reason().unwrap_or("error").to_string();
    }
    let code = match status.as_u16() {
        401 => ErrorCode::Unauthorized,
        403 => ErrorCode::Forbidden,
        404 => ErrorCode::NotFound,
        409 => ErrorCode::InvalidState,
        413 => ErrorCode::PayloadTooLarge,
        429 => ErrorCode::RateLimited,
        400..=499 => ErrorCode::InvalidArgument,
        _ => ErrorCode::Internal,
    };
    let body = ErrorBody {
        error: ErrorDetail {
            code: code.as_str().to_string(),
            message,
            field: None,
        },
    };
    let mut out = (status, axum::Json(body)).into_response();
    for (k, v) in parts.headers.iter() {
        if k != axum::http::header::CONTENT_TYPE && k != axum::http::header::CONTENT_LENGTH {
            out.headers_mut().insert(k.clone(), v.clone());
        }
    }
    out
}

pub(crate) async fn fallback() -> ApiError {
    ApiError(Error::new(ErrorCode::NotFound, "no such endpoint"))
}

/// Marks a response relayed from a sandbox (set by the port proxy): the
/// JSON error layer leaves its status and body as the sandbox's server
/// made them.
#[derive(Clone, Copy)]
pub struct Relayed;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types_follow_axum_rule() {
        let mut h = axum::http::HeaderMap::new();
        assert!(!json_content_type(&h));
        for (v, ok) in [
            ("application/json", true),
            ("Application/JSON; charset=utf-8", true),
            ("application/problem+json", true),
            ("text/json", false),
            ("application/jsonx", false),
            ("text/plain", false),
        ] {
            h.insert(
                axum::http::header::CONTENT_TYPE,
                axum::http::HeaderValue::from_static(v),
            );
            assert_eq!(json_content_type(&h), ok, "{v}");
        }
    }

    #[derive(Deserialize, Default, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Body {
        #[serde(default)]
        n: u32,
    }

    #[test]
    fn bodies_are_objects_and_an_empty_one_is_the_default() {
        assert_eq!(
            optional_json::<Body>(&Bytes::from_static(b"  \n")).ok(),
            Some(Body::default())
        );
        assert_eq!(
            optional_json::<Body>(&Bytes::from_static(b" {\"n\": 3}")).ok(),
            Some(Body { n: 3 })
        );
        for bad in [
            &b"[]"[..],
            b"[3]",
            b"3",
            b"{\"n\": \"x\"}",
            b"{\"m\": 1}",
            b"{",
        ] {
            let e = optional_json::<Body>(&Bytes::copy_from_slice(bad)).expect_err("refused");
            assert_eq!(e.0.code, ErrorCode::InvalidArgument, "{bad:?}");
        }
    }

    #[test]
    fn overload_answers_carry_retry_after() {
        let r = ApiError(Error::new(ErrorCode::Overloaded, "busy")).into_response();
        assert!(r.headers().contains_key(axum::http::header::RETRY_AFTER));
        let r = ApiError(Error::invalid("no")).into_response();
        assert_eq!(r.status(), StatusCode::BAD_REQUEST);
        assert!(!r.headers().contains_key(axum::http::header::RETRY_AFTER));
    }
}
