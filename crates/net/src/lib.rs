//! The daemon's egress service: sandboxes reach the outside only through a
//! resolver and a proxy the daemon runs for each of them, under the policy
//! of their manifest (`network.allow` / `network.deny`) and the operator's
//! deny list.
//!
//! # How "only addresses it resolved for that sandbox" holds
//!
//! The resolver never hands a sandbox a real address. An allowed name gets a
//! synthetic address from 198.18.0.0/15, derived from the name (stable
//! across pause/resume and nodes, collisions resolved per sandbox), and the
//! firewall inside the sandbox's namespace sends every TCP connection to the
//! proxy. The proxy maps the synthetic address back to the name, so a
//! sandbox can reach by name only names its own resolver answered. It then
//! requires the connection's TLS SNI or HTTP Host to be a name the policy
//! admits (an address shared by a CDN does not open a denied name), resolves
//! the real address itself, from the daemon's namespace, at connect time,
//! and refuses it when a deny list (the tenant's, or the operator's:
//! metadata endpoints, private ranges) covers it; so an answer that changes
//! between the sandbox's question and its connection (DNS rebinding) gains
//! nothing. Destinations given by address (`ip`, CIDR, `ip:port`) are
//! dialled as given when a network entry admits them; `127.x.y.z:P` is the
//! host's loopback port P, since the proxy dials from the daemon's side.
//!
//! Modules: [`policy`] (decisions), [`sniff`] (SNI and Host), [`names`]
//! (synthetic addresses), [`dns`] (the resolver), [`upstream`] (how the
//! daemon resolves), [`limit`] (rate limits and budgets), [`sandbox`]
//! (per-sandbox state), [`firewall`] (the rules inside the namespace),
//! [`proxy`], [`service`] (the `Egress` implementation).

pub mod dns;
pub mod firewall;
pub mod limit;
pub mod names;
pub mod policy;
pub mod proxy;
pub mod sandbox;
pub mod service;
pub mod sniff;
pub mod upstream;

pub use sandbox::CounterValues;
pub use service::{EgressConfig, EgressService};

/// Per-sandbox limits of the egress service.
#[derive(Debug, Clone)]
pub struct Limits {
    /// DNS questions: burst and sustained rate per second.
    pub dns_burst: u32,
    pub dns_per_sec: u32,
    /// Upstream queries (the tunnelling budget): burst and rate per second.
    pub upstream_burst: u32,
    pub upstream_per_sec: u32,
    /// Proxied connections open at once.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            dns_burst: 200,
            dns_per_sec: 50,
            upstream_burst: 50,
            upstream_per_sec: 5,
            max_connections: 512,
        }
    }
}
