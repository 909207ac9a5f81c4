//! The firewall inside a sandbox's network namespace.
//!
//! Made from a thread that joined the namespace (`netns::run_in`), with the
//! `ip` and `nft` programs (a readable nftables script, applied atomically;
//! `nft list table ip stasis_egress` inside the namespace shows it):
//! - `lo` up, and a veth pair living entirely inside the namespace
//!   (`egress0` with 192.0.2.1/32 and the default route), so that connect()
//!   to any IPv4 address routes and reaches the nat hook;
//! - nat output: every UDP packet to port 53 is redirected to the resolver;
//!   TCP to each allowed host-loopback destination `127.x.y.z:P` and every
//!   TCP connection to a non-local address are redirected to the proxy;
//! - filter output (inet, so IPv6 too): what stays on `lo` or is addressed
//!   to the namespace itself passes (the redirected traffic included);
//!   everything else is dropped (other UDP, ICMP, IPv6 leaving).
//!
//! The sandbox has no CAP_NET_ADMIN over its namespace and cannot change
//! any of this.

use std::fs::File;
use std::io::{self, Write};
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

pub const TABLE: &str = "stasis_egress";
pub const LINK: &str = "egress0";
const PEER: &str = "egress1";
const LINK_ADDR: &str = "192.0.2.1/32";

/// What the rules send where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ports {
    pub proxy: u16,
    pub dns: u16,
    /// Allowed host-loopback destinations.
    pub loopback: Vec<(Ipv4Addr, u16)>,
}

/// The nftables script (replacing any previous version of the tables).
pub fn script(p: &Ports) -> String {
    let mut lo = String::new();
    for (ip, port) in &p.loopback {
        lo.push_str(&format!(
            "    ip daddr {ip} tcp dport {port} redirect to :{}\n",
            p.proxy
        ));
    }
    format!(
        "add table ip {TABLE}
delete table ip {TABLE}
add table inet {TABLE}
delete table inet {TABLE}
table ip {TABLE} {{
  chain out_nat {{
    type nat hook output priority -100; policy accept;
    udp dport 53 redirect to :{dns}
{lo}    fib daddr type local return
    meta l4proto tcp redirect to :{proxy}
  }}
}}
table inet {TABLE} {{
  chain out_filter {{
    type filter hook output priority 0; policy drop;
    oifname \"lo\" accept
    fib daddr type local accept
  }}
}}
",
        dns = p.dns,
        proxy = p.proxy,
    )
}

fn run(cmd: &mut Command, stdin: Option<&str>) -> io::Result<()> {
    let prog = cmd.get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| {
            io::Error::other(format!("run {prog}: {e} (is iproute2/nftables installed?)"))
        })?;
    if let (Some(s), Some(mut w)) = (stdin, child.stdin.take()) {
        w.write_all(s.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{prog}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

fn ip(args: &[&str]) -> io::Result<()> {
    run(Command::new("ip").args(args), None)
}

/// Bring up `lo` and the route (idempotent). Call from inside the namespace.
pub fn links() -> io::Result<()> {
    ip(&["link", "set", "lo", "up"])?;
    let exists = Command::new("ip")
        .args(["link", "show", "dev", LINK])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?
        .success();
    if !exists {
        ip(&["link", "add", LINK, "type", "veth", "peer", "name", PEER])?;
        ip(&["link", "set", PEER, "up"])?;
        ip(&["link", "set", LINK, "up"])?;
        ip(&["addr", "add", LINK_ADDR, "dev", LINK])?;
        ip(&["route", "add", "default", "dev", LINK])?;
    }
    Ok(())
}

/// Load the rules. Call from inside the namespace.
pub fn load(p: &Ports) -> io::Result<()> {
    run(Command::new("nft").args(["-f", "-"]), Some(&script(p)))
}

/// Replace the rules of the namespace `netns` (a runtime policy change).
pub fn reload(netns: &File, p: &Ports) -> io::Result<()> {
    let p = p.clone();
    stasis_backend::netns::run_in(netns, move || load(&p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_redirects_and_drops() {
        let s = script(&Ports {
            proxy: 4000,
            dns: 5300,
            loopback: vec![(Ipv4Addr::LOCALHOST, 8080)],
        });
        assert!(s.contains("udp dport 53 redirect to :5300"), "{s}");
        assert!(s.contains("ip daddr 127.0.0.1 tcp dport 8080 redirect to :4000"));
        assert!(s.contains("meta l4proto tcp redirect to :4000"));
        assert!(s.contains("policy drop"));
        // The loopback redirect comes before the local-address exemption.
        assert!(s.find("8080").unwrap() < s.find("fib daddr type local return").unwrap());
    }
}
