//! A microVM's network: one virtio-net NIC on QEMU user networking (slirp),
//! QEMU in a network namespace of its own, and what the daemon's egress
//! service must do in that namespace.
//!
//! Every new guest gets the NIC (guest `10.0.2.15/24`, gateway and host
//! alias `10.0.2.2`, which is also its nameserver). QEMU always runs in
//! a new, private network namespace (the jail's), so every socket slirp
//! opens for the guest (its TCP connections, UDP flows and the DNS
//! forwarder) is opened *inside* that namespace. What the guest can reach is
//! decided there:
//!
//! * **With an egress service** ([`Nic::Open`]): slirp runs without
//!   `restrict`, and the backend calls `Egress::attach(id, ns, policy)` once
//!   QEMU exists and before the guest runs (QEMU starts with `-S`). The
//!   backend itself only brings `lo` up and lets QEMU's uid bind low ports
//!   (`ip_unprivileged_port_start=0`, for port forwards).
//! * **Without one** ([`Nic::Restricted`]): `restrict=on`, slirp drops
//!   every packet the guest sends out. Nothing leaves (fail closed); port
//!   forwards (host -> guest) still work.
//! * **Snapshots from before every guest had a NIC** (meta `network: false`)
//!   restore with [`Nic::None`]: no NIC, no network, no ports.
//!
//! ## What the egress service must do for a QEMU namespace
//!
//! The namespace holds only `lo` (up, `127.0.0.1/8`); the egress service
//! adds the rest (a default route, its firewall, its listeners). Then:
//!
//! * **TCP** from the guest to `A:P` becomes a connection by QEMU (its jail
//!   uid) from inside the namespace to `A:P`: redirect it to the proxy,
//!   which applies the policy (SNI/Host for names, IP/CIDR for raw TCP).
//! * **Guest `10.0.2.2:P`** is slirp's alias for the namespace's
//!   `127.0.0.1:P`. The guest agent relays an allow entry `127.0.0.1:P`
//!   (the *host's* loopback port P) from guest `127.0.0.1:P` to
//!   `10.0.2.2:P`, so the firewall must redirect `127.0.0.1:P` to the proxy
//!   like any other destination, and the proxy reaches the host's
//!   `127.0.0.1:P`. A guest can aim `10.0.2.2` at any port of the
//!   namespace's `127.0.0.1`: the proxy and resolver listeners live there,
//!   and a connection to the proxy's own listener address is refused by the
//!   proxy.
//! * **DNS**: the guest's resolv.conf names `10.0.2.2`, so its queries
//!   arrive at the namespace's `127.0.0.1:53` (UDP, and TCP for long
//!   answers) from QEMU's uid: the resolver must answer there (listen, or
//!   redirect port 53). Not slirp's own forwarder `10.0.2.3`: it sends to
//!   the first nameserver of `/etc/resolv.conf` in QEMU's mount namespace,
//!   and the jail has no `/etc`, so libslirp (4.7) drops every query to it
//!   (checked: nothing arrives anywhere).
//! * **Port forwards** of the daemon (`connect_port`): slirp listens on
//!   [`PORT_ADDR`]`:P` (`127.0.0.2`) in the namespace and the daemon (uid 0)
//!   connects there; those connections must pass untouched (leave
//!   `127.0.0.2` alone, or match only QEMU's uid). Should the guest reach
//!   them through slirp, they only lead back into the same guest.
//! * Everything else (other UDP, ICMP, IPv6: slirp runs `ipv6=off`) is
//!   dropped.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

use stasis_core::{Error, Result};

/// QEMU user networking's addresses.
pub const GUEST_ADDR: &str = "10.0.2.15";
pub const GUEST_CIDR: &str = "10.0.2.15/24";
pub const GATEWAY: &str = "10.0.2.2";
/// The guest's nameserver: slirp's alias for QEMU's `127.0.0.1`, where
/// the egress resolver answers (see the module doc for why not `10.0.2.3`).
pub const NAMESERVER: &str = GATEWAY;
/// slirp's own DNS forwarder (unused: it finds no resolv.conf in the jail).
const SLIRP_DNS: &str = "10.0.2.3";
/// The netdev id (HMP `hostfwd_add` names it).
pub const NETDEV: &str = "net0";
/// Where slirp listens for the daemon's port forwards, inside QEMU's
/// namespace: not `127.0.0.1`, which the guest reaches as `10.0.2.2`.
pub const PORT_ADDR: std::net::Ipv4Addr = std::net::Ipv4Addr::new(127, 0, 0, 2);

/// The NIC a guest has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Nic {
    /// No network device (snapshots taken before every guest had one).
    None,
    /// slirp with `restrict=on`: nothing the guest sends leaves QEMU.
    #[default]
    Restricted,
    /// slirp without restriction, in a namespace the egress service polices.
    Open,
}

impl Nic {
    /// The NIC of a guest: `open` when an egress service polices QEMU's own
    /// namespace, else restricted; none only for a guest saved without one.
    pub fn choose(had_nic: bool, egress: bool, own_netns: bool) -> Nic {
        match (had_nic, egress && own_netns) {
            (false, _) => Nic::None,
            (true, true) => Nic::Open,
            (true, false) => Nic::Restricted,
        }
    }

    /// The `-netdev` argument (None: no NIC).
    pub fn netdev(self) -> Option<String> {
        let restrict = match self {
            Nic::None => return None,
            Nic::Restricted => "on",
            Nic::Open => "off",
        };
        Some(format!(
            "user,id={NETDEV},restrict={restrict},ipv6=off,net=10.0.2.0/24,host={GATEWAY},dns={SLIRP_DNS}"
        ))
    }
}

/// The network namespace of QEMU `pid`, when it has one of its own: a
/// QEMU of an older backend with a NIC ran in the daemon's, which must never
/// get port forwards or an egress attachment. (Jailed QEMUs started by this
/// backend always have their own.)
pub fn qemu_netns(pid: i32) -> Result<Option<File>> {
    use std::os::unix::fs::MetadataExt;
    let ns = stasis_backend::netns::open(pid as u32)
        .map_err(|e| Error::backend(format!("QEMU's network namespace: {e}")))?;
    let (theirs, ours) = (ns.metadata()?, std::fs::metadata("/proc/self/ns/net")?);
    Ok(((theirs.dev(), theirs.ino()) != (ours.dev(), ours.ino())).then_some(ns))
}

/// Prepare QEMU's namespace for the backend's own use: `lo` up and low
/// ports bindable by QEMU's uid (slirp's port forward listeners).
pub fn prepare_netns(ns: &File) -> Result<()> {
    stasis_backend::netns::run_in(ns, || {
        set_up("lo")?;
        // /proc/sys/net follows the netns of the thread that opens it.
        std::fs::write("/proc/sys/net/ipv4/ip_unprivileged_port_start", "0")
    })
    .map_err(|e| Error::backend(format!("preparing QEMU's network namespace: {e}")))
}

/// Bring an interface up (SIOCSIFFLAGS on a socket of the current netns).
fn set_up(name: &str) -> io::Result<()> {
    let sock = std::net::UdpSocket::bind("0.0.0.0:0").or_else(|_| {
        // lo down: binding may fail; any AF_INET socket will do.
        let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(unsafe { <std::net::UdpSocket as std::os::fd::FromRawFd>::from_raw_fd(fd) })
    })?;
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    unsafe { req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short };
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The HMP command that forwards `PORT_ADDR:port` in QEMU's namespace to
/// the guest's `port`.
pub fn hostfwd_add(port: u16) -> String {
    format!("hostfwd_add {NETDEV} tcp:{PORT_ADDR}:{port}-:{port}")
}

/// The guest ports slirp forwards, from HMP `info usernet`.
pub fn parse_usernet_forwards(text: &str) -> Vec<u16> {
    let mut v: Vec<u16> = text
        .lines()
        .filter(|l| l.contains("[HOST_FORWARD]"))
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // Protocol[State] FD SrcAddr SrcPort DestAddr DestPort RecvQ SendQ
            (f.len() >= 6).then(|| f[5].parse().ok()).flatten()
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nic_follows_the_egress_service_and_the_snapshot() {
        assert_eq!(Nic::choose(false, true, true), Nic::None);
        assert_eq!(Nic::choose(true, true, true), Nic::Open);
        // No service, or QEMU in the host's namespace: fail closed.
        assert_eq!(Nic::choose(true, false, true), Nic::Restricted);
        assert_eq!(Nic::choose(true, true, false), Nic::Restricted);
        assert!(Nic::None.netdev().is_none());
        assert_eq!(
            Nic::Restricted.netdev().unwrap(),
            "user,id=net0,restrict=on,ipv6=off,net=10.0.2.0/24,host=10.0.2.2,dns=10.0.2.3"
        );
        assert!(Nic::Open.netdev().unwrap().contains("restrict=off"));
        assert!(!Nic::Open.netdev().unwrap().contains("guestfwd"));
    }

    #[test]
    fn usernet_forwards_are_parsed() {
        let text = "Hub -1 (net0):\r\n  Protocol[State]    FD  Source Address  Port   Dest. Address  Port RecvQ SendQ\r\n  \
                    TCP[HOST_FORWARD]  15       127.0.0.2  8000       10.0.2.15  8000     0     0\r\n  \
                    TCP[ESTABLISHED]   17       127.0.0.1 40000       10.0.2.15    22     0     0\r\n  \
                    TCP[HOST_FORWARD]  14       127.0.0.2    80       10.0.2.15    80     0     0\r\n";
        assert_eq!(parse_usernet_forwards(text), vec![80, 8000]);
        assert!(parse_usernet_forwards("").is_empty());
        assert_eq!(
            hostfwd_add(8000),
            "hostfwd_add net0 tcp:127.0.0.2:8000-:8000"
        );
    }

    #[test]
    fn a_process_in_our_namespace_has_none_of_its_own() {
        assert!(qemu_netns(std::process::id() as i32).unwrap().is_none());
        assert!(qemu_netns(i32::MAX).is_err());
    }

    #[test]
    fn a_prepared_namespace_has_loopback_up() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipped: needs root (setns)");
            return;
        }
        let ns = std::thread::spawn(|| {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
            File::open("/proc/thread-self/ns/net").unwrap()
        })
        .join()
        .unwrap();
        let connect = |ns: &File| {
            let l =
                stasis_backend::netns::run_in(ns, || std::net::TcpListener::bind((PORT_ADDR, 0)))
                    .unwrap();
            let addr = l.local_addr().unwrap();
            stasis_backend::netns::connect_tcp(ns, addr, std::time::Duration::from_secs(2))
        };
        assert!(connect(&ns).is_err(), "lo is down in a new namespace");
        prepare_netns(&ns).unwrap();
        connect(&ns).unwrap();
        let start = stasis_backend::netns::run_in(&ns, || {
            std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        })
        .unwrap();
        assert_eq!(start.trim(), "0");
        // The host's own setting is untouched.
        let host =
            std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start").unwrap();
        assert_ne!(host.trim(), "0");
    }
}
