//! The Connect protocol (connectrpc.com/docs/protocol) as envd's clients
//! speak it: unary calls (`application/json` body in, JSON out, errors as an
//! HTTP status and `{"code": "<connect code>", "message": ...}`), and
//! streams (`application/connect+json`): messages in 5-byte envelopes (one
//! flag byte, a big-endian u32 length), the response ending with an
//! end-of-stream envelope (flag 0x02) holding `{}` or `{"error": {...}}`.
//!
//! Both pinned SDKs use the JSON codec only (the Python SDK's
//! `ENVD_JSON_CODEC`, the JS SDK's `useBinaryFormat: false`) and no
//! compression, so the binary protobuf codec is answered with a Connect
//! `unimplemented` error naming what is served.
//!
//! Written here rather than taken from a crate: the Rust Connect crates
//! (`connectrpc`, `connectrpc-axum`, `axum-connect`) are young, generate
//! their types from `.proto` files at build time (protoc or their own
//! generators) and bring a protobuf runtime the JSON-only clients never
//! need; the wire format itself is the envelope and the error shape below.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use serde::de::DeserializeOwned;
use serde::Serialize;

use stasis_core::{Error, ErrorCode};

/// Content type of a unary JSON call.
pub const UNARY_JSON: &str = "application/json";
/// Content type of a streaming JSON call.
pub const STREAM_JSON: &str = "application/connect+json";
/// Envelope flag: the end-of-stream message.
pub const END_STREAM: u8 = 0x02;
/// Envelope flag: the message is compressed (never sent by the SDKs).
pub const COMPRESSED: u8 = 0x01;
/// The largest request message accepted (requests are small JSON objects;
/// stdin chunks included).
pub const MAX_MESSAGE: usize = 16 * 1024 * 1024;

/// The Connect error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Canceled,
    Unknown,
    InvalidArgument,
    DeadlineExceeded,
    NotFound,
    AlreadyExists,
    PermissionDenied,
    ResourceExhausted,
    FailedPrecondition,
    Aborted,
    Unimplemented,
    Internal,
    Unavailable,
    Unauthenticated,
}

impl Code {
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Canceled => "canceled",
            Code::Unknown => "unknown",
            Code::InvalidArgument => "invalid_argument",
            Code::DeadlineExceeded => "deadline_exceeded",
            Code::NotFound => "not_found",
            Code::AlreadyExists => "already_exists",
            Code::PermissionDenied => "permission_denied",
            Code::ResourceExhausted => "resource_exhausted",
            Code::FailedPrecondition => "failed_precondition",
            Code::Aborted => "aborted",
            Code::Unimplemented => "unimplemented",
            Code::Internal => "internal",
            Code::Unavailable => "unavailable",
            Code::Unauthenticated => "unauthenticated",
        }
    }

    /// The HTTP status of a unary error with this code (the protocol's table).
    pub fn http_status(self) -> StatusCode {
        let n = match self {
            Code::Canceled => 499,
            Code::Unknown | Code::Internal => 500,
            Code::InvalidArgument | Code::FailedPrecondition => 400,
            Code::DeadlineExceeded => 504,
            Code::NotFound => 404,
            Code::AlreadyExists | Code::Aborted => 409,
            Code::PermissionDenied => 403,
            Code::ResourceExhausted => 429,
            Code::Unimplemented => 501,
            Code::Unavailable => 503,
            Code::Unauthenticated => 401,
        };
        StatusCode::from_u16(n).expect("valid status")
    }

    /// The Connect code of a stasis error.
    pub fn of(code: ErrorCode) -> Code {
        match code {
            ErrorCode::InvalidArgument | ErrorCode::InvalidManifest => Code::InvalidArgument,
            ErrorCode::Unauthorized => Code::Unauthenticated,
            ErrorCode::Forbidden => Code::PermissionDenied,
            ErrorCode::NotFound => Code::NotFound,
            ErrorCode::AlreadyExists => Code::AlreadyExists,
            ErrorCode::InvalidState | ErrorCode::MountPoint | ErrorCode::RegionMismatch => {
                Code::FailedPrecondition
            }
            ErrorCode::Busy => Code::Aborted,
            ErrorCode::PayloadTooLarge | ErrorCode::RateLimited | ErrorCode::Overloaded => {
                Code::ResourceExhausted
            }
            ErrorCode::Timeout => Code::DeadlineExceeded,
            ErrorCode::Unsupported => Code::Unimplemented,
            ErrorCode::PortUnreachable | ErrorCode::Unavailable => Code::Unavailable,
            ErrorCode::IntegrityError
            | ErrorCode::IncompatibleSnapshot
            | ErrorCode::BuildFailed
            | ErrorCode::BackendError
            | ErrorCode::Internal => Code::Internal,
        }
    }
}

/// A Connect error: a code and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcError {
    pub code: Code,
    pub message: String,
    /// A stream ending this way drops the connection instead of sending
    /// an end-of-stream error: what a client sees when the sandbox behind
    /// envd is gone (the SDKs then probe `/health` and say so).
    pub lost: bool,
}

impl RpcError {
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        RpcError {
            code,
            message: message.into(),
            lost: false,
        }
    }

    /// The connection lost, as when the sandbox went away ([`Self::lost`]).
    pub fn lost(message: impl Into<String>) -> Self {
        RpcError {
            lost: true,
            ..RpcError::new(Code::Unavailable, message)
        }
    }

    fn json(&self) -> serde_json::Value {
        serde_json::json!({"code": self.code.as_str(), "message": self.message})
    }
}

impl From<Error> for RpcError {
    fn from(e: Error) -> Self {
        RpcError::new(Code::of(e.code), e.message)
    }
}

impl IntoResponse for RpcError {
    /// A unary call's error.
    fn into_response(self) -> Response {
        let mut r = (self.code.http_status(), self.json().to_string()).into_response();
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(UNARY_JSON));
        r
    }
}

pub type RpcResult<T> = std::result::Result<T, RpcError>;

/// Whether a call is unary or streaming, from its content type; the
/// protobuf codec and anything else is refused.
pub fn check_content_type(headers: &HeaderMap, streaming: bool) -> RpcResult<()> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let base = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let want = if streaming { STREAM_JSON } else { UNARY_JSON };
    if base == want {
        return Ok(());
    }
    Err(RpcError::new(
        Code::Unimplemented,
        format!("content type {ct:?} is not served: this envd speaks the Connect protocol with the JSON codec ({want})"),
    ))
}

/// A unary request's message.
pub fn decode<T: DeserializeOwned>(body: &[u8]) -> RpcResult<T> {
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}".as_slice()
    } else {
        body
    };
    serde_json::from_slice(body)
        .map_err(|e| RpcError::new(Code::InvalidArgument, format!("malformed request: {e}")))
}

/// A unary call's answer.
pub fn unary<T: Serialize>(msg: &T) -> Response {
    match serde_json::to_vec(msg) {
        Ok(b) => ([(header::CONTENT_TYPE, UNARY_JSON)], b).into_response(),
        Err(e) => RpcError::new(Code::Internal, e.to_string()).into_response(),
    }
}

/// One envelope.
pub fn envelope(flags: u8, payload: &[u8]) -> Bytes {
    let mut b = Vec::with_capacity(5 + payload.len());
    b.push(flags);
    b.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    b.extend_from_slice(payload);
    Bytes::from(b)
}

/// The end-of-stream envelope, with the stream's error if it failed.
pub fn end_stream(err: Option<&RpcError>) -> Bytes {
    let body = match err {
        None => serde_json::json!({}),
        Some(e) => serde_json::json!({"error": e.json()}),
    };
    envelope(END_STREAM, body.to_string().as_bytes())
}

/// Splits a byte stream into envelopes.
#[derive(Default)]
pub struct Deframer {
    buf: Vec<u8>,
}

/// One decoded envelope.
#[derive(Debug, PartialEq, Eq)]
pub struct Frame {
    pub flags: u8,
    pub payload: Vec<u8>,
}

impl Deframer {
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next whole envelope, if one is buffered.
    pub fn next_frame(&mut self) -> RpcResult<Option<Frame>> {
        if self.buf.len() < 5 {
            return Ok(None);
        }
        let flags = self.buf[0];
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if len > MAX_MESSAGE {
            return Err(RpcError::new(
                Code::ResourceExhausted,
                format!("message of {len} bytes exceeds the limit of {MAX_MESSAGE}"),
            ));
        }
        if flags & COMPRESSED != 0 {
            return Err(RpcError::new(
                Code::Unimplemented,
                "compressed messages are not served (send Connect-Content-Encoding: identity)",
            ));
        }
        if self.buf.len() < 5 + len {
            return Ok(None);
        }
        let payload = self.buf[5..5 + len].to_vec();
        self.buf.drain(..5 + len);
        Ok(Some(Frame { flags, payload }))
    }

    /// Bytes left that make no whole envelope.
    pub fn rest(&self) -> usize {
        self.buf.len()
    }
}

/// Reads the messages of a streaming request body one at a time.
pub struct MessageReader<S> {
    body: S,
    frames: Deframer,
    done: bool,
}

impl<S, E> MessageReader<S>
where
    S: Stream<Item = std::result::Result<Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    pub fn new(body: S) -> Self {
        MessageReader {
            body,
            frames: Deframer::default(),
            done: false,
        }
    }

    /// The next message, None at the end of the body.
    pub async fn next<T: DeserializeOwned>(&mut self) -> RpcResult<Option<T>> {
        loop {
            if let Some(f) = self.frames.next_frame()? {
                if f.flags & END_STREAM != 0 {
                    self.done = true;
                    return Ok(None);
                }
                return decode(&f.payload).map(Some);
            }
            if self.done {
                return Ok(None);
            }
            match self.body.next().await {
                Some(Ok(chunk)) => self.frames.push(&chunk),
                Some(Err(e)) => {
                    return Err(RpcError::new(
                        Code::Canceled,
                        format!("reading the request: {e}"),
                    ))
                }
                None => {
                    self.done = true;
                    if self.frames.rest() != 0 {
                        return Err(RpcError::new(
                            Code::InvalidArgument,
                            "the request ends inside a message",
                        ));
                    }
                    return Ok(None);
                }
            }
        }
    }
}

/// The answer of a streaming call: every message of `messages` in an
/// envelope, then the end of the stream (with the first error, which ends
/// it).
pub fn streaming<T, S>(messages: S) -> Response
where
    T: Serialize + Send + 'static,
    S: Stream<Item = RpcResult<T>> + Send + 'static,
{
    // An item is a frame, or the connection dropped (a lost stream).
    let body = futures::stream::unfold((Box::pin(messages), false), |(mut s, ended)| async move {
        if ended {
            return None;
        }
        let frame = match s.next().await {
            Some(Ok(m)) => match serde_json::to_vec(&m) {
                Ok(b) => return Some((Ok(envelope(0, &b)), (s, false))),
                Err(e) => end_stream(Some(&RpcError::new(Code::Internal, e.to_string()))),
            },
            Some(Err(e)) if e.lost => {
                return Some((Err(std::io::Error::other(e.message)), (s, true)));
            }
            Some(Err(e)) => end_stream(Some(&e)),
            None => end_stream(None),
        };
        Some((Ok(frame), (s, true)))
    });
    (
        [(header::CONTENT_TYPE, STREAM_JSON)],
        Body::from_stream(body),
    )
        .into_response()
}

/// The call's deadline (`Connect-Timeout-Ms`, at most ten digits as the
/// protocol says), if the client set one.
pub fn timeout_of(headers: &HeaderMap) -> Option<std::time::Duration> {
    let v = headers.get("connect-timeout-ms")?.to_str().ok()?.trim();
    if v.is_empty() || v.len() > 10 || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    v.parse().ok().map(std::time::Duration::from_millis)
}

/// `messages` until `deadline` passes: then a `deadline_exceeded` error
/// (which ends the stream, see [`streaming`]).
pub fn until<T, S>(
    messages: S,
    deadline: Option<std::time::Duration>,
) -> impl Stream<Item = RpcResult<T>> + Send
where
    T: Send,
    S: Stream<Item = RpcResult<T>> + Send + Unpin,
{
    let at = deadline.map(|d| tokio::time::Instant::now() + d);
    futures::stream::unfold((messages, at, false), |(mut s, at, over)| async move {
        if over {
            return None;
        }
        let next = match at {
            None => s.next().await,
            Some(at) => match tokio::time::timeout_at(at, s.next()).await {
                Ok(n) => n,
                Err(_) => {
                    let e = RpcError::new(Code::DeadlineExceeded, "the call's deadline passed");
                    return Some((Err(e), (s, Some(at), true)));
                }
            },
        };
        next.map(|m| (m, (s, at, false)))
    })
}

/// The answer of a streaming call refused before it started: a whole
/// stream holding only the error (the protocol answers streams with 200).
pub fn stream_error(e: RpcError) -> Response {
    ([(header::CONTENT_TYPE, STREAM_JSON)], end_stream(Some(&e))).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[test]
    fn envelopes_round_trip_across_chunk_boundaries() {
        let a = envelope(0, br#"{"a":1}"#);
        let b = end_stream(None);
        let mut all = a.to_vec();
        all.extend_from_slice(&b);
        let mut d = Deframer::default();
        // Byte at a time: nothing until a whole envelope is there.
        let mut got = Vec::new();
        for byte in all {
            d.push(&[byte]);
            while let Some(f) = d.next_frame().unwrap() {
                got.push(f);
            }
        }
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].flags, 0);
        assert_eq!(got[0].payload, br#"{"a":1}"#);
        assert_eq!(got[1].flags, END_STREAM);
        assert_eq!(got[1].payload, b"{}");
        assert_eq!(d.rest(), 0);
    }

    #[test]
    fn oversized_and_compressed_messages_are_refused() {
        let mut d = Deframer::default();
        let mut big = vec![0u8];
        big.extend_from_slice(&((MAX_MESSAGE as u32) + 1).to_be_bytes());
        d.push(&big);
        assert_eq!(d.next_frame().unwrap_err().code, Code::ResourceExhausted);
        let mut d = Deframer::default();
        d.push(&envelope(COMPRESSED, b"x"));
        assert_eq!(d.next_frame().unwrap_err().code, Code::Unimplemented);
    }

    #[tokio::test]
    async fn a_lost_stream_drops_the_connection_instead_of_ending() {
        use http_body_util::BodyExt;
        let msgs = futures::stream::iter(vec![
            Ok(serde_json::json!({"a": 1})),
            Err(RpcError::lost("gone")),
        ]);
        let mut body = streaming(msgs).into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first[0], 0, "a message envelope first");
        // Then the body fails: the client sees the connection drop, not an
        // end-of-stream frame.
        assert!(body.frame().await.unwrap().is_err());
        // An ordinary error still ends the stream with its trailer.
        let msgs = futures::stream::iter(vec![Err::<serde_json::Value, _>(RpcError::new(
            Code::NotFound,
            "x",
        ))]);
        let mut body = streaming(msgs).into_body();
        let last = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(last[0], END_STREAM);
    }

    #[test]
    fn end_stream_carries_the_error() {
        let e = RpcError::new(Code::NotFound, "process with pid 7 not found");
        let b = end_stream(Some(&e));
        assert_eq!(b[0], END_STREAM);
        let v: serde_json::Value = serde_json::from_slice(&b[5..]).unwrap();
        assert_eq!(v["error"]["code"], "not_found");
        assert_eq!(v["error"]["message"], "process with pid 7 not found");
    }

    #[test]
    fn stasis_errors_map_to_connect_codes_and_statuses() {
        let e: RpcError = Error::not_found("path /x").into();
        assert_eq!(e.code, Code::NotFound);
        assert_eq!(Code::NotFound.http_status(), 404);
        assert_eq!(Code::of(ErrorCode::AlreadyExists), Code::AlreadyExists);
        assert_eq!(Code::of(ErrorCode::Unauthorized), Code::Unauthenticated);
        assert_eq!(Code::of(ErrorCode::Timeout), Code::DeadlineExceeded);
        assert_eq!(Code::of(ErrorCode::Unsupported), Code::Unimplemented);
        assert_eq!(Code::Unauthenticated.http_status(), 401);
        assert_eq!(Code::Canceled.http_status().as_u16(), 499);
    }

    #[test]
    fn only_the_json_codec_is_served() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONTENT_TYPE,
            "application/json; charset=utf-8".parse().unwrap(),
        );
        assert!(check_content_type(&h, false).is_ok());
        assert!(check_content_type(&h, true).is_err());
        h.insert(
            header::CONTENT_TYPE,
            "application/connect+json".parse().unwrap(),
        );
        assert!(check_content_type(&h, true).is_ok());
        h.insert(header::CONTENT_TYPE, "application/proto".parse().unwrap());
        assert_eq!(
            check_content_type(&h, false).unwrap_err().code,
            Code::Unimplemented
        );
    }

    #[test]
    fn an_empty_unary_body_is_the_empty_message() {
        let v: serde_json::Value = decode(b"").unwrap();
        assert_eq!(v, serde_json::json!({}));
        assert_eq!(
            decode::<serde_json::Value>(b"{nope").unwrap_err().code,
            Code::InvalidArgument
        );
    }

    #[tokio::test]
    async fn a_stream_ends_with_its_trailer_or_its_error() {
        let ok = streaming(futures::stream::iter(vec![Ok(serde_json::json!({"n": 1}))]));
        let body = ok.into_body().collect().await.unwrap().to_bytes();
        let mut d = Deframer::default();
        d.push(&body);
        assert_eq!(d.next_frame().unwrap().unwrap().payload, br#"{"n":1}"#);
        let end = d.next_frame().unwrap().unwrap();
        assert_eq!(
            (end.flags, end.payload.as_slice()),
            (END_STREAM, b"{}".as_slice())
        );

        let failing = streaming(futures::stream::iter(vec![
            Ok(serde_json::json!({"n": 1})),
            Err(RpcError::new(Code::Internal, "boom")),
            Ok(serde_json::json!({"n": 2})),
        ]));
        let body = failing.into_body().collect().await.unwrap().to_bytes();
        let mut d = Deframer::default();
        d.push(&body);
        d.next_frame().unwrap().unwrap();
        let end = d.next_frame().unwrap().unwrap();
        assert_eq!(end.flags, END_STREAM);
        assert!(String::from_utf8_lossy(&end.payload).contains("boom"));
        // Nothing after the error.
        assert!(d.next_frame().unwrap().is_none());
    }

    #[tokio::test]
    async fn a_stream_past_its_deadline_ends_with_deadline_exceeded() {
        let mut h = HeaderMap::new();
        assert_eq!(timeout_of(&h), None);
        h.insert("connect-timeout-ms", "2000".parse().unwrap());
        let d = timeout_of(&h);
        assert_eq!(d, Some(std::time::Duration::from_millis(2000)));
        h.insert("connect-timeout-ms", "12345678901".parse().unwrap());
        assert_eq!(timeout_of(&h), None);
        // One message, then nothing more ever: the deadline ends it.
        h.insert("connect-timeout-ms", "20".parse().unwrap());
        let d = timeout_of(&h);
        let never = futures::stream::iter(vec![Ok(1)]).chain(futures::stream::pending());
        let got: Vec<RpcResult<i32>> = until(Box::pin(never), d).collect().await;
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], Ok(1));
        assert_eq!(got[1].as_ref().unwrap_err().code, Code::DeadlineExceeded);
        // No deadline: the stream as it is.
        let all: Vec<RpcResult<i32>> = until(futures::stream::iter(vec![Ok(1), Ok(2)]), None)
            .collect()
            .await;
        assert_eq!(all.len(), 2);
    }

    #[tokio::test]
    async fn a_streamed_request_reads_message_by_message() {
        let mut body = envelope(0, br#"{"x":1}"#).to_vec();
        body.extend_from_slice(&envelope(0, br#"{"x":2}"#));
        let chunks: Vec<std::result::Result<Bytes, std::io::Error>> = body
            .chunks(3)
            .map(|c| Ok(Bytes::copy_from_slice(c)))
            .collect();
        let mut r = MessageReader::new(futures::stream::iter(chunks));
        let a: serde_json::Value = r.next().await.unwrap().unwrap();
        let b: serde_json::Value = r.next().await.unwrap().unwrap();
        assert_eq!((a["x"].as_i64(), b["x"].as_i64()), (Some(1), Some(2)));
        assert!(r.next::<serde_json::Value>().await.unwrap().is_none());
        // A body cut inside a message is an error, not a silent end.
        let cut: Vec<std::result::Result<Bytes, std::io::Error>> =
            vec![Ok(Bytes::from_static(&[0, 0, 0, 0, 9, b'{']))];
        let mut r = MessageReader::new(futures::stream::iter(cut));
        assert!(r.next::<serde_json::Value>().await.is_err());
    }
}
