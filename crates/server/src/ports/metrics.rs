//! Counters of the port proxy, registered in the daemon's registry (served
//! with the others at `/metrics`):
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `stasis_port_proxy_requests_total` | counter | `via` (token, signed_url), `kind` (http, websocket) |
//! | `stasis_port_proxy_bytes_total` | counter | `direction` (to_sandbox, from_sandbox) |
//! | `stasis_port_proxy_denials_total` | counter | `reason` (malformed, bad_signature, expired, revoked, unreachable) |

use prometheus::{IntCounterVec, Opts, Registry};

use super::proxy::Dir;
use super::token::Denial;

/// Why a proxied request was not served: a refused signed URL, or nothing
/// listening on the port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DenyReason {
    Url(Denial),
    Unreachable,
}

impl DenyReason {
    pub fn as_str(self) -> &'static str {
        match self {
            DenyReason::Url(d) => d.as_str(),
            DenyReason::Unreachable => "unreachable",
        }
    }
}

#[derive(Clone)]
pub struct PortMetrics {
    requests: IntCounterVec,
    bytes: IntCounterVec,
    denials: IntCounterVec,
}

fn reg(r: &Registry, c: IntCounterVec) -> IntCounterVec {
    r.register(Box::new(c.clone()))
        .expect("port metric names are unique");
    c
}

impl PortMetrics {
    pub fn new(r: &Registry) -> Self {
        let requests = reg(
            r,
            IntCounterVec::new(
                Opts::new(
                    "stasis_port_proxy_requests_total",
                    "Requests relayed to a sandbox port, by authentication and kind.",
                ),
                &["via", "kind"],
            )
            .expect("metric"),
        );
        let bytes = reg(
            r,
            IntCounterVec::new(
                Opts::new(
                    "stasis_port_proxy_bytes_total",
                    "Body and tunnel bytes relayed to and from sandbox ports.",
                ),
                &["direction"],
            )
            .expect("metric"),
        );
        let denials = reg(
            r,
            IntCounterVec::new(
                Opts::new(
                    "stasis_port_proxy_denials_total",
                    "Port proxy requests refused, by reason.",
                ),
                &["reason"],
            )
            .expect("metric"),
        );
        for d in Denial::ALL {
            denials.with_label_values(&[d.as_str()]);
        }
        denials.with_label_values(&["unreachable"]);
        for d in ["to_sandbox", "from_sandbox"] {
            bytes.with_label_values(&[d]);
        }
        PortMetrics {
            requests,
            bytes,
            denials,
        }
    }

    pub fn request(&self, signed: bool, websocket: bool) {
        let via = if signed { "signed_url" } else { "token" };
        let kind = if websocket { "websocket" } else { "http" };
        self.requests.with_label_values(&[via, kind]).inc();
    }

    pub fn bytes(&self, dir: Dir, n: u64) {
        let d = match dir {
            Dir::ToSandbox => "to_sandbox",
            Dir::FromSandbox => "from_sandbox",
        };
        self.bytes.with_label_values(&[d]).inc_by(n);
    }

    pub fn denied(&self, why: DenyReason) {
        self.denials.with_label_values(&[why.as_str()]).inc();
    }
}
