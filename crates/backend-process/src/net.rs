//! Egress allowlist (`network.allow`) for the process backend.
//!
//! Empty allowlist: the sandbox keeps its empty network namespace (loopback
//! only). Otherwise, once the sandbox's PID 1 runs:
//! - a veth pair: `stx<hash>` in the host's namespace with the first address
//!   of a private /30 (from 10.213.0.0/16, chosen per sandbox), `eth0` in the
//!   sandbox's namespace with the second one and a default route via the host
//!   side;
//! - one nftables table per sandbox in the host namespace (`inet
//!   stasis_<daemon tag>_<sandbox id>`), created and deleted with the
//!   sandbox: from the host veth only new TCP connections to the allowlisted
//!   `ip:port`s are accepted (forwarded, or delivered locally when the
//!   destination is the host itself), plus replies (conntrack
//!   established/related); everything else arriving from it is dropped,
//!   including UDP (DNS), ICMP, IPv6 and any other port of the host;
//! - `127.0.0.0/8:P` in the allowlist means the *host's* loopback port P: in
//!   the sandbox namespace a small nat table rewrites `127.0.0.1:P` to the
//!   host veth address (and masquerades what leaves `eth0`); on the host the
//!   prerouting chain rewrites that back to `127.0.0.1:P`, which the kernel
//!   accepts from the veth because `route_localnet` is set on it (and on the
//!   sandbox's `eth0`, so the rewritten loopback packet may leave it).
//!   Other loopback ports stay on the sandbox's own `lo`.
//! - forwarded destinations are masqueraded behind the host; forwarding is
//!   enabled on the host veth only. Replies from an uplink need forwarding on
//!   that interface too (`net.ipv4.ip_forward=1`), which stays the
//!   operator's choice.
//!
//! The sandbox cannot change any of this: it has no CAP_NET_ADMIN, and
//! seccomp refuses setns/unshare.
//!
//! Why the `nft` and `ip` programs rather than a netlink crate: the rules are
//! a readable nftables script (what an operator would inspect with `nft list
//! table ...`), applied atomically by `nft -f`; the Rust nftables crates
//! either wrap the same binary's JSON or lack NAT/conntrack expressions.
//! These commands run only at sandbox create/rebuild and destroy.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddrV4};
use std::process::{Command, Stdio};
use std::sync::Mutex;

use stasis_core::{Error, ErrorCode, Manifest, Result};

/// Addresses of the per-sandbox /30 blocks.
const NET_BASE: [u8; 2] = [10, 213];
/// Name of the sandbox-side interface.
pub const SANDBOX_IF: &str = "eth0";

static ALLOC: Mutex<()> = Mutex::new(());

fn fnv(parts: &[&str]) -> u64 {
    let mut h: u64 = 0xcbf29ce484222325;
    for p in parts {
        for b in p.bytes().chain([0u8]) {
            h ^= b as u64;
            h = h.wrapping_mul(0x100000001b3);
        }
    }
    h
}

/// Short tag of one daemon instance (its cgroup parent), part of every
/// table name so daemons sharing a host never touch each other's tables.
pub fn daemon_tag(cgroup_parent: &str) -> String {
    format!("{:08x}", fnv(&[cgroup_parent]) as u32)
}

pub fn table_name(cgroup_parent: &str, id: &str) -> String {
    format!(
        "stasis_{}_{}",
        daemon_tag(cgroup_parent),
        id.replace('-', "_")
    )
}

pub fn host_if(cgroup_parent: &str, id: &str) -> String {
    format!("stx{:012x}", fnv(&[cgroup_parent, id]) & 0xffff_ffff_ffff)
}

/// The allowlist as IPv4 socket addresses, or `invalid_manifest` naming the
/// entry this backend cannot enforce.
pub fn allowlist(m: &Manifest) -> Result<Vec<SocketAddrV4>> {
    let mut v = Vec::new();
    for (i, a) in m.network.allow.iter().enumerate() {
        let field = format!("network.allow[{i}]");
        let bad = |msg: &str| {
            Error::new(ErrorCode::InvalidManifest, format!("{field}: {msg}")).with_field(&field)
        };
        let sa: std::net::SocketAddr = a.parse().map_err(|_| bad("must be ip:port"))?;
        let IpAddr::V4(ip) = sa.ip() else {
            return Err(bad("the process backend enforces IPv4 destinations only"));
        };
        if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() {
            return Err(bad("must be a unicast address"));
        }
        let sa = SocketAddrV4::new(ip, sa.port());
        if ip.is_loopback()
            && v.iter()
                .any(|o: &SocketAddrV4| o.ip().is_loopback() && o.port() == sa.port() && *o != sa)
        {
            return Err(bad("two loopback destinations with the same port"));
        }
        if !v.contains(&sa) {
            v.push(sa);
        }
    }
    Ok(v)
}

fn run(cmd: &mut Command, stdin: Option<&str>) -> std::result::Result<(), String> {
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
        .map_err(|e| format!("run {prog}: {e} (is iproute2/nftables installed?)"))?;
    if let (Some(s), Some(mut w)) = (stdin, child.stdin.take()) {
        let _ = w.write_all(s.as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("wait {prog}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{prog}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

fn used_v4() -> Vec<Ipv4Addr> {
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show"])
        .stdin(Stdio::null())
        .output();
    let Ok(out) = out else { return Vec::new() };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            it.find(|w| *w == "inet")?;
            it.next()?.split('/').next()?.parse().ok()
        })
        .collect()
}

fn block(n: u32) -> (Ipv4Addr, Ipv4Addr) {
    let base = u32::from(Ipv4Addr::new(NET_BASE[0], NET_BASE[1], 0, 0)) + (n % 16384) * 4;
    (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2))
}

fn host_rules(
    table: &str,
    hif: &str,
    host_ip: Ipv4Addr,
    sb_ip: Ipv4Addr,
    allow: &[SocketAddrV4],
) -> String {
    let mut pre = String::new();
    let mut input = String::new();
    let mut fwd = String::new();
    for a in allow {
        if a.ip().is_loopback() {
            pre.push_str(&format!(
                "    iifname \"{hif}\" ip daddr {host_ip} tcp dport {p} dnat ip to {ip}:{p}\n",
                ip = a.ip(),
                p = a.port()
            ));
            input.push_str(&format!(
                "    iifname \"{hif}\" ct status dnat ip daddr {} tcp dport {} ct state new accept\n",
                a.ip(),
                a.port()
            ));
        } else {
            let rule = format!(
                "    iifname \"{hif}\" ip daddr {} tcp dport {} ct state new accept\n",
                a.ip(),
                a.port()
            );
            // The host's own addresses are delivered locally, others forwarded.
            input.push_str(&rule);
            fwd.push_str(&rule);
        }
    }
    format!(
        "table inet {table} {{
  chain sb_pre {{
    type nat hook prerouting priority dstnat; policy accept;
{pre}  }}
  chain sb_input {{
    type filter hook input priority filter; policy accept;
    iifname \"{hif}\" ct state established,related accept
{input}    iifname \"{hif}\" drop
  }}
  chain sb_forward {{
    type filter hook forward priority filter; policy accept;
    iifname \"{hif}\" ct state established,related accept
{fwd}    iifname \"{hif}\" drop
    oifname \"{hif}\" ct state established,related accept
    oifname \"{hif}\" drop
  }}
  chain sb_post {{
    type nat hook postrouting priority srcnat; policy accept;
    iifname \"{hif}\" ip saddr {sb_ip} oifname != \"{hif}\" masquerade
  }}
}}
"
    )
}

fn sandbox_rules(host_ip: Ipv4Addr, allow: &[SocketAddrV4]) -> String {
    let mut out = String::new();
    for a in allow.iter().filter(|a| a.ip().is_loopback()) {
        out.push_str(&format!(
            "    ip daddr {} tcp dport {p} dnat ip to {host_ip}:{p}\n",
            a.ip(),
            p = a.port()
        ));
    }
    format!(
        "table ip stasis {{
  chain sb_out {{
    type nat hook output priority -100; policy accept;
{out}  }}
  chain sb_post {{
    type nat hook postrouting priority srcnat; policy accept;
    oifname \"{SANDBOX_IF}\" masquerade
  }}
}}
"
    )
}

fn sysctl_if(hif: &str, key: &str, v: &str) -> std::result::Result<(), String> {
    let p = format!("/proc/sys/net/ipv4/conf/{hif}/{key}");
    std::fs::write(&p, v).map_err(|e| format!("write {p}: {e}"))
}

/// Give the running sandbox (PID 1 = host pid `init_pid`) its veth and rules.
/// On error, whatever was made is removed again.
pub fn setup(cgroup_parent: &str, id: &str, init_pid: i32, allow: &[SocketAddrV4]) -> Result<()> {
    let table = table_name(cgroup_parent, id);
    let hif = host_if(cgroup_parent, id);
    let r = (|| -> std::result::Result<(), String> {
        teardown_names(&table, &hif);
        let (host_ip, sb_ip) = {
            let _g = ALLOC.lock().unwrap();
            let used = used_v4();
            let start = fnv(&[cgroup_parent, id]) as u32;
            let (h, s) = (0..16384)
                .map(|i| block(start.wrapping_add(i)))
                .find(|(h, s)| !used.contains(h) && !used.contains(s))
                .ok_or("no free /30 left in 10.213.0.0/16")?;
            let pid = init_pid.to_string();
            run(
                Command::new("ip").args([
                    "link", "add", &hif, "type", "veth", "peer", "name", SANDBOX_IF, "netns", &pid,
                ]),
                None,
            )?;
            run(
                Command::new("ip").args(["addr", "add", &format!("{h}/30"), "dev", &hif]),
                None,
            )?;
            (h, s)
        };
        let _ = std::fs::write(format!("/proc/sys/net/ipv6/conf/{hif}/disable_ipv6"), "1");
        sysctl_if(&hif, "route_localnet", "1")?;
        sysctl_if(&hif, "forwarding", "1")?;
        sysctl_if(&hif, "rp_filter", "1")?;
        run(
            Command::new("nft").args(["-f", "-"]),
            Some(&host_rules(&table, &hif, host_ip, sb_ip, allow)),
        )?;
        run(Command::new("ip").args(["link", "set", &hif, "up"]), None)?;
        let script = format!(
            "set -e
echo 1 > /proc/sys/net/ipv6/conf/{i}/disable_ipv6 || true
echo 1 > /proc/sys/net/ipv4/conf/{i}/route_localnet
ip addr add {sb_ip}/30 dev {i}
ip link set {i} up
ip route add default via {host_ip} dev {i}
nft -f -",
            i = SANDBOX_IF
        );
        run(
            Command::new("nsenter").args([
                "--target",
                &init_pid.to_string(),
                "--net",
                "sh",
                "-c",
                &script,
            ]),
            Some(&sandbox_rules(host_ip, allow)),
        )
    })();
    r.map_err(|e| {
        teardown_names(&table, &hif);
        Error::backend(format!("sandbox network: {e}"))
    })
}

fn teardown_names(table: &str, hif: &str) {
    let _ = run(
        Command::new("nft").args(["delete", "table", "inet", table]),
        None,
    );
    if std::path::Path::new("/sys/class/net").join(hif).exists() {
        let _ = run(Command::new("ip").args(["link", "del", hif]), None);
    }
}

/// Remove the sandbox's table and host veth (the sandbox side goes with
/// its namespace). Idempotent.
pub fn teardown(cgroup_parent: &str, id: &str) {
    teardown_names(&table_name(cgroup_parent, id), &host_if(cgroup_parent, id));
}

/// Names of this daemon's sandbox tables that exist on the host.
pub fn tables(cgroup_parent: &str) -> Vec<String> {
    let prefix = format!("stasis_{}_", daemon_tag(cgroup_parent));
    let out = Command::new("nft")
        .args(["list", "tables", "inet"])
        .stdin(Stdio::null())
        .output();
    let Ok(out) = out else { return Vec::new() };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().strip_prefix("table inet "))
        .filter(|t| t.starts_with(&prefix))
        .map(|t| t.to_string())
        .collect()
}

/// Delete tables (and host veths) of sandboxes not in `known`.
pub fn cleanup_orphans(cgroup_parent: &str, known: &[&str]) {
    let keep: Vec<String> = known.iter().map(|k| table_name(cgroup_parent, k)).collect();
    for t in tables(cgroup_parent) {
        if !keep.contains(&t) {
            let _ = run(
                Command::new("nft").args(["delete", "table", "inet", &t]),
                None,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allowlist_checks() {
        let mut m = Manifest::default();
        m.network.allow = vec![
            "127.0.0.1:80".into(),
            "10.0.0.1:443".into(),
            "127.0.0.1:80".into(),
        ];
        assert_eq!(allowlist(&m).unwrap().len(), 2);
        m.network.allow = vec!["[::1]:80".into()];
        let e = allowlist(&m).unwrap_err();
        assert_eq!(e.field.as_deref(), Some("network.allow[0]"));
        m.network.allow = vec!["127.0.0.1:80".into(), "127.0.0.2:80".into()];
        assert_eq!(
            allowlist(&m).unwrap_err().field.as_deref(),
            Some("network.allow[1]")
        );
    }

    #[test]
    fn names_fit_the_kernel() {
        let id = "sb-0123456789abcdef0123456789abcdef";
        assert!(host_if("stasis", id).len() <= 15);
        assert_ne!(host_if("a", id), host_if("b", id));
        assert!(table_name("stasis", id).starts_with("stasis_"));
        let (h, s) = block(16383);
        assert_eq!(h, Ipv4Addr::new(10, 213, 255, 253));
        assert_eq!(s, Ipv4Addr::new(10, 213, 255, 254));
        let r = host_rules("t", "stx1", h, s, &["127.0.0.1:8080".parse().unwrap()]);
        assert!(r.contains("dnat ip to 127.0.0.1:8080"), "{r}");
    }
}
