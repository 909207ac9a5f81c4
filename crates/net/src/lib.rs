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
//! and refuses it when a deny list (the tenant's, or the operator's
//! `--egress-deny`) covers it or the operator's [`guard`] refuses it; so an
//! answer that changes between the sandbox's question and its connection
//! (DNS rebinding) gains nothing. Destinations given by address (`ip`, CIDR,
//! `ip:port`) are dialled as given when a network entry admits them and the
//! guard does not refuse them.
//!
//! # What egress never reaches
//!
//! The guard refuses, whatever a policy says: loopback, unspecified,
//! link-local (cloud metadata), multicast, broadcast and reserved
//! addresses, IPv6 forms of all of them, every address of the daemon's
//! host and the daemon's own listen addresses; and private ranges (RFC
//! 1918, 100.64.0.0/10, fc00::/7) unless the operator passes
//! `--egress-allow-private`. Only an operator's `--egress-expose ip:port`
//! opens a single host destination (never the daemon's). A tenant entry
//! that names or resolves into a refused range is refused when the policy
//! is set ([`validate`]); a wider network (`0.0.0.0/0`) is accepted and
//! never matches a refused address.
//!
//! Modules: [`policy`] (decisions), [`sniff`] (SNI and Host), [`names`]
//! (synthetic addresses), [`dns`] (the resolver), [`upstream`] (how the
//! daemon resolves), [`limit`] (rate limits and budgets), [`sandbox`]
//! (per-sandbox state), [`firewall`] (the rules inside the namespace),
//! [`guard`] (what is never reached), [`validate`] (a tenant's entries
//! against it), [`proxy`], [`service`] (the `Egress` implementation).

pub mod dns;
pub mod firewall;
pub mod guard;
pub mod limit;
pub mod names;
pub mod policy;
pub mod proxy;
pub mod sandbox;
pub mod service;
pub mod sniff;
pub mod upstream;
pub mod validate;

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
