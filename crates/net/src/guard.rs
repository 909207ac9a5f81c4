//! What egress never reaches, whatever a sandbox's policy says: the host
//! and the networks around it.
//!
//! Always refused:
//! - loopback (127.0.0.0/8, ::1), unspecified addresses (0.0.0.0/8, ::),
//!   link-local (169.254.0.0/16, fe80::/10, cloud metadata included),
//!   multicast (224.0.0.0/4, ff00::/8), broadcast and the reserved
//!   240.0.0.0/4;
//! - every address of the daemon's own host (its interfaces, read at each
//!   check) and the daemon's own listen addresses (an unspecified listen
//!   address stands for all of the host's addresses at that port), which
//!   not even an operator exposure opens;
//!
//! and, unless the operator allows them (`--egress-allow-private`), the
//! private ranges: RFC 1918 (10/8, 172.16/12, 192.168/16), shared address
//! space (100.64.0.0/10, CGNAT) and unique-local IPv6 (fc00::/7, with the
//! deprecated site-local fec0::/10).
//!
//! An IPv6 form that reaches an IPv4 address (IPv4-mapped `::ffff:a.b.c.d`,
//! IPv4-compatible `::a.b.c.d`, NAT64 `64:ff9b::a.b.c.d`) is judged as that
//! IPv4 address.
//!
//! The operator may open single host destinations (`--egress-expose`,
//! e.g. a package mirror on `127.0.0.1:3141`): an exposure admits what it
//! names for a tenant who lists it, never the daemon's listen addresses.
//!
//! The guard is consulted twice: when a tenant's policy is set (an entry
//! that names a refused address, or a network lying wholly inside a refused
//! range, is refused with the entry named; a wider network such as
//! `0.0.0.0/0` is accepted and simply never matches a refused address), and
//! by the proxy for every real address it is about to dial.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use stasis_core::manifest::network::{Cidr, Entry};

/// A range egress refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Range {
    Unspecified,
    Loopback,
    LinkLocal,
    Multicast,
    Broadcast,
    Reserved,
    /// Opened by `--egress-allow-private`.
    Private,
}

impl Range {
    pub fn describe(self) -> &'static str {
        match self {
            Range::Unspecified => "an unspecified address",
            Range::Loopback => "the host's loopback",
            Range::LinkLocal => "link-local (cloud metadata included)",
            Range::Multicast => "multicast",
            Range::Broadcast => "broadcast",
            Range::Reserved => "reserved address space",
            Range::Private => "a private network (the operator has not allowed private ranges)",
        }
    }
}

const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u8) -> Cidr {
    Cidr {
        addr: IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
        prefix,
    }
}

const fn v6(first: u16, last: u16, prefix: u8) -> Cidr {
    Cidr {
        addr: IpAddr::V6(Ipv6Addr::new(first, 0, 0, 0, 0, 0, 0, last)),
        prefix,
    }
}

/// The refused ranges; the first that contains an address names it.
pub const RANGES: &[(Cidr, Range)] = &[
    (v4(0, 0, 0, 0, 8), Range::Unspecified),
    (v4(127, 0, 0, 0, 8), Range::Loopback),
    (v4(169, 254, 0, 0, 16), Range::LinkLocal),
    (v4(224, 0, 0, 0, 4), Range::Multicast),
    (v4(255, 255, 255, 255, 32), Range::Broadcast),
    (v4(240, 0, 0, 0, 4), Range::Reserved),
    (v4(10, 0, 0, 0, 8), Range::Private),
    (v4(172, 16, 0, 0, 12), Range::Private),
    (v4(192, 168, 0, 0, 16), Range::Private),
    (v4(100, 64, 0, 0, 10), Range::Private),
    (v6(0, 0, 128), Range::Unspecified),
    (v6(0, 1, 128), Range::Loopback),
    (v6(0xfe80, 0, 10), Range::LinkLocal),
    (v6(0xff00, 0, 8), Range::Multicast),
    (v6(0xfc00, 0, 7), Range::Private),
    (v6(0xfec0, 0, 10), Range::Private),
];

/// The IPv4 address an IPv6 form reaches (mapped, compatible, NAT64), or
/// `ip` itself.
pub fn canonical(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(a) = ip else { return ip };
    if let Some(m) = a.to_ipv4_mapped() {
        return IpAddr::V4(m);
    }
    let s = a.segments();
    let tail = Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7]));
    // IPv4-compatible ::a.b.c.d (:: and ::1 keep their IPv6 meaning).
    if s[..6] == [0; 6] && u32::from(tail) > 1 {
        return IpAddr::V4(tail);
    }
    // NAT64's well-known prefix 64:ff9b::/96.
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return IpAddr::V4(tail);
    }
    ip
}

/// The IPv4 network an IPv6 network of mapped addresses stands for.
fn canonical_net(n: &Cidr) -> Cidr {
    match (n.addr, canonical(n.addr)) {
        (IpAddr::V6(_), IpAddr::V4(a)) if n.prefix >= 96 => Cidr {
            addr: IpAddr::V4(a),
            prefix: n.prefix - 96,
        },
        _ => *n,
    }
}

/// The refused range `ip` lies in (private ranges included).
pub fn range_of(ip: IpAddr) -> Option<Range> {
    let ip = canonical(ip);
    RANGES.iter().find(|(c, _)| c.contains(ip)).map(|(_, r)| *r)
}

/// Why the guard refuses an address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Why {
    /// One of the daemon's own listen addresses.
    Daemon,
    /// An address of the daemon's host.
    Host,
    /// A refused range.
    Range(Range),
}

impl std::fmt::Display for Why {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Why::Daemon => f.write_str("the daemon's own API address"),
            Why::Host => f.write_str("an address of the daemon's host"),
            Why::Range(r) => f.write_str(r.describe()),
        }
    }
}

/// The host's addresses, `None` when they cannot be read.
pub type LocalAddrs = fn() -> Option<Vec<IpAddr>>;

/// The operator's side of every egress decision.
#[derive(Debug, Clone)]
pub struct Guard {
    allow_private: bool,
    expose: Vec<Entry>,
    listen: Vec<SocketAddr>,
    local: LocalAddrs,
}

impl Guard {
    /// `expose`: network entries (address, network, optional port) the
    /// operator opens; `listen`: the daemon's listen addresses.
    pub fn new(allow_private: bool, expose: Vec<Entry>, listen: Vec<SocketAddr>) -> Guard {
        Guard {
            allow_private,
            expose,
            listen,
            local: local_addrs,
        }
    }

    /// The same guard with another view of the host's addresses (tests).
    pub fn with_local(mut self, local: LocalAddrs) -> Guard {
        self.local = local;
        self
    }

    fn exposed(&self, ip: IpAddr, port: Option<u16>) -> bool {
        self.expose.iter().any(|e| match e {
            Entry::Net { net, port: p } => {
                canonical_net(net).contains(ip)
                    && match (p, port) {
                        (None, _) => true,
                        (Some(a), Some(b)) => *a == b,
                        (Some(_), None) => false,
                    }
            }
            _ => false,
        })
    }

    fn is_daemon(&self, ip: IpAddr, port: Option<u16>, local: &Option<Vec<IpAddr>>) -> bool {
        // A port-less question (a tenant's entry for every port of an
        // address) is not about the daemon alone: its other ports are judged
        // by range and exposure, and the daemon's port stays refused at
        // connect time, where the port is always known.
        let Some(port) = port else {
            return false;
        };
        self.listen.iter().any(|l| {
            port == l.port()
                && if l.ip().is_unspecified() {
                    range_of(ip) == Some(Range::Loopback)
                        || local.as_ref().is_none_or(|v| v.contains(&ip))
                } else {
                    canonical(l.ip()) == ip
                }
        })
    }

    /// Why `ip` on `port` (`None`: on some port) must not be dialled, or
    /// `None` when it may.
    pub fn refusal(&self, ip: IpAddr, port: Option<u16>) -> Option<Why> {
        let ip = canonical(ip);
        let local: Option<Vec<IpAddr>> =
            (self.local)().map(|v| v.into_iter().map(canonical).collect());
        if self.is_daemon(ip, port, &local) {
            return Some(Why::Daemon);
        }
        if self.exposed(ip, port) {
            return None;
        }
        match range_of(ip) {
            Some(Range::Private) if self.allow_private => {}
            Some(r) => return Some(Why::Range(r)),
            None => {}
        }
        // Unreadable: refuse rather than risk the host's own addresses.
        match local {
            Some(v) if !v.contains(&ip) => None,
            _ => Some(Why::Host),
        }
    }

    /// Whether a tenant's allow entry may stand: an address is judged as
    /// [`Guard::refusal`] does; a network is refused when it lies wholly
    /// inside a refused range no exposure reaches into, and otherwise
    /// accepted (its refused part never matches). Names are judged by
    /// their addresses elsewhere; wildcards at connect time.
    pub fn check_entry(&self, e: &Entry) -> Result<(), String> {
        let Entry::Net { net, port } = e else {
            return Ok(());
        };
        let net = canonical_net(net);
        if net.is_host() {
            return match self.refusal(net.addr, *port) {
                Some(why) => Err(format!("{} is {why}; egress never reaches it", net.addr)),
                None => Ok(()),
            };
        }
        let inside = RANGES
            .iter()
            .find(|(c, _)| c.prefix <= net.prefix && c.contains(net.addr));
        match inside {
            Some((_, Range::Private)) if self.allow_private => Ok(()),
            Some((c, r)) => {
                let reach_in = self.expose.iter().any(|x| match x {
                    Entry::Net { net: xn, .. } => canonical_net(xn).overlaps(&net),
                    _ => false,
                });
                if reach_in {
                    Ok(())
                } else {
                    Err(format!(
                        "{net} lies inside {c}, {}; egress never reaches it",
                        r.describe()
                    ))
                }
            }
            None => Ok(()),
        }
    }
}

/// Every address of the daemon's host (its network namespace), through
/// `getifaddrs(3)`; called per check so that addresses added later count.
/// (Written against libc: the crates that wrap it would bring netlink
/// machinery for one list.)
pub fn local_addrs() -> Option<Vec<IpAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return None;
    }
    let mut v = Vec::new();
    let mut p = head;
    while !p.is_null() {
        // SAFETY: `p` is a node of the list getifaddrs returned.
        let ifa = unsafe { &*p };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points at a sockaddr of the family it names.
            unsafe {
                match i32::from((*ifa.ifa_addr).sa_family) {
                    libc::AF_INET => {
                        let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in);
                        v.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr))));
                    }
                    libc::AF_INET6 => {
                        let sa = &*(ifa.ifa_addr as *const libc::sockaddr_in6);
                        v.push(IpAddr::V6(Ipv6Addr::from(sa.sin6_addr.s6_addr)));
                    }
                    _ => {}
                }
            }
        }
        p = ifa.ifa_next;
    }
    // SAFETY: `head` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    Some(v)
}

#[cfg(test)]
#[path = "guard_tests.rs"]
mod tests;
