//! How the daemon itself resolves a name a sandbox may reach: first the
//! operator's hosts view (`--egress-hosts FILE`, hosts-file format), then
//! either a DNS server (`--egress-upstream ADDR`, queried over UDP) or the
//! system resolver. Only IPv4 addresses are returned (the proxy dials IPv4).

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RData, RecordType};
use stasis_core::{Error, ErrorCode, Result};

/// How long one upstream question may take.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Default)]
pub struct Upstream {
    hosts: HashMap<String, Vec<Ipv4Addr>>,
    server: Option<SocketAddr>,
}

/// Parse hosts-file text: `address name [alias ...]`, `#` comments. IPv6
/// lines are skipped; a bad address or name is an error naming the line.
pub fn parse_hosts(text: &str) -> std::result::Result<HashMap<String, Vec<Ipv4Addr>>, String> {
    let mut map: HashMap<String, Vec<Ipv4Addr>> = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let mut it = line.split_whitespace();
        let addr: IpAddr = it
            .next()
            .unwrap()
            .parse()
            .map_err(|_| format!("line {}: not an address", n + 1))?;
        let IpAddr::V4(v4) = addr else { continue };
        for name in it {
            let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
            let e = map.entry(name).or_default();
            if !e.contains(&v4) {
                e.push(v4);
            }
        }
    }
    Ok(map)
}

impl Upstream {
    /// `hosts`: a hosts file to consult first; `server`: a DNS server to
    /// ask instead of the system resolver.
    pub fn new(hosts: Option<&Path>, server: Option<SocketAddr>) -> Result<Upstream> {
        let hosts = match hosts {
            None => HashMap::new(),
            Some(p) => {
                let text = std::fs::read_to_string(p).map_err(|e| {
                    Error::new(
                        ErrorCode::InvalidArgument,
                        format!("egress hosts {}: {e}", p.display()),
                    )
                })?;
                parse_hosts(&text).map_err(|m| {
                    Error::new(
                        ErrorCode::InvalidArgument,
                        format!("egress hosts {}: {m}", p.display()),
                    )
                })?
            }
        };
        Ok(Upstream { hosts, server })
    }

    /// The hosts view's answer, if it names `name` (costs no upstream query).
    pub fn from_hosts(&self, name: &str) -> Option<Vec<Ipv4Addr>> {
        self.hosts.get(name).cloned()
    }

    /// Ask the upstream (not the hosts view). `Ok(empty)`: the name has no
    /// IPv4 address; `Err`: the upstream did not answer.
    pub async fn query(&self, name: &str) -> Result<Vec<Ipv4Addr>> {
        match self.server {
            Some(s) => ask(s, name).await,
            None => {
                let r = tokio::time::timeout(
                    UPSTREAM_TIMEOUT,
                    tokio::net::lookup_host((name.to_string(), 0)),
                )
                .await;
                match r {
                    Err(_) => Err(Error::new(
                        ErrorCode::BackendError,
                        "system resolver timed out",
                    )),
                    // getaddrinfo reports a missing name as an error.
                    Ok(Err(_)) => Ok(Vec::new()),
                    Ok(Ok(it)) => {
                        let mut v: Vec<Ipv4Addr> = Vec::new();
                        for a in it {
                            if let IpAddr::V4(ip) = a.ip() {
                                if !v.contains(&ip) {
                                    v.push(ip);
                                }
                            }
                        }
                        Ok(v)
                    }
                }
            }
        }
    }
}

/// One A question to a DNS server over UDP.
async fn ask(server: SocketAddr, name: &str) -> Result<Vec<Ipv4Addr>> {
    let fail = |m: String| Error::new(ErrorCode::BackendError, format!("upstream dns: {m}"));
    let qname = Name::from_ascii(format!("{name}.")).map_err(|e| fail(e.to_string()))?;
    let id: u16 = rand::random();
    let mut msg = Message::new();
    msg.set_id(id)
        .set_message_type(MessageType::Query)
        .set_op_code(OpCode::Query)
        .set_recursion_desired(true)
        .add_query(Query::query(qname.clone(), RecordType::A));
    let bytes = msg.to_vec().map_err(|e| fail(e.to_string()))?;
    let bind: SocketAddr = if server.is_ipv4() {
        "0.0.0.0:0".parse().unwrap()
    } else {
        "[::]:0".parse().unwrap()
    };
    let sock = tokio::net::UdpSocket::bind(bind)
        .await
        .map_err(|e| fail(e.to_string()))?;
    sock.connect(server)
        .await
        .map_err(|e| fail(e.to_string()))?;
    sock.send(&bytes).await.map_err(|e| fail(e.to_string()))?;
    let mut buf = vec![0u8; 4096];
    let deadline = tokio::time::Instant::now() + UPSTREAM_TIMEOUT;
    loop {
        let n = tokio::time::timeout_at(deadline, sock.recv(&mut buf))
            .await
            .map_err(|_| fail("timed out".into()))?
            .map_err(|e| fail(e.to_string()))?;
        let Ok(resp) = Message::from_vec(&buf[..n]) else {
            continue;
        };
        if resp.id() != id || resp.queries().first().map(|q| q.name()) != Some(&qname) {
            continue;
        }
        return Ok(resp
            .answers()
            .iter()
            .filter_map(|r| match r.data() {
                RData::A(a) => Some(a.0),
                _ => None,
            })
            .collect());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_file() {
        let m = parse_hosts(
            "# test view\n127.0.0.1 allowed.test Other.Allowed.Test\n::1 allowed.test\n\n127.0.0.2 allowed.test # second\n",
        )
        .unwrap();
        assert_eq!(
            m["allowed.test"],
            vec![Ipv4Addr::LOCALHOST, Ipv4Addr::new(127, 0, 0, 2)]
        );
        assert_eq!(m["other.allowed.test"], vec![Ipv4Addr::LOCALHOST]);
        assert_eq!(
            parse_hosts("x a.test\n").unwrap_err(),
            "line 1: not an address"
        );
    }
}
