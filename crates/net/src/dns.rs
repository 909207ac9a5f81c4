//! The per-sandbox resolver: the only DNS server a sandbox can reach (the
//! firewall sends every UDP query on port 53 here).
//!
//! An A question for a name the policy admits is resolved by the daemon
//! ([`SandboxNet::resolve`]: hosts view, cache, upstream within budget) and
//! answered with the name's synthetic address (see [`crate::names`]); a
//! name that does not exist gets NXDOMAIN. A name the policy does not admit
//! gets NXDOMAIN without any upstream query. Other question types for an
//! admitted name get an empty answer (AAAA included: the proxy carries
//! IPv4). Over the per-sandbox question rate, or once the upstream budget
//! is spent, the answer is REFUSED, so a flood of random names under an
//! allowed wildcard (DNS tunnelling) costs the upstream at most the budget.

use std::sync::Arc;

use hickory_proto::op::{Message, MessageType, OpCode, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

use crate::sandbox::{ResolveError, SandboxNet};

/// TTL of a synthetic answer.
pub const ANSWER_TTL: u32 = 60;

fn reply(q: &Message, code: ResponseCode) -> Message {
    let mut r = Message::new();
    r.set_id(q.id())
        .set_message_type(MessageType::Response)
        .set_op_code(q.op_code())
        .set_recursion_desired(q.recursion_desired())
        .set_recursion_available(true)
        .set_response_code(code);
    r.add_queries(q.queries().iter().cloned());
    r
}

/// The answer to one DNS packet (`None`: not a query, dropped).
pub async fn answer(net: &SandboxNet, packet: &[u8]) -> Option<Vec<u8>> {
    let q = Message::from_vec(packet).ok()?;
    if q.message_type() != MessageType::Query {
        return None;
    }
    net.count(|c| &c.dns_queries);
    let r = decide(net, &q).await;
    r.to_vec().ok()
}

async fn decide(net: &SandboxNet, q: &Message) -> Message {
    if !net.dns_bucket.lock().unwrap().take() {
        net.count(|c| &c.dns_limited);
        return reply(q, ResponseCode::Refused);
    }
    if q.op_code() != OpCode::Query {
        return reply(q, ResponseCode::NotImp);
    }
    let [question] = q.queries() else {
        return reply(q, ResponseCode::FormErr);
    };
    let name = question.name().to_ascii().to_ascii_lowercase();
    let name = name.strip_suffix('.').unwrap_or(&name).to_string();
    if net.policy().name(&name, None).is_err() {
        net.count(|c| &c.dns_refused);
        return reply(q, ResponseCode::NXDomain);
    }
    if question.query_type() != RecordType::A {
        return reply(q, ResponseCode::NoError);
    }
    match net.resolve(&name).await {
        Ok(v) if v.is_empty() => reply(q, ResponseCode::NXDomain),
        Ok(_) => {
            let Some(addr) = net.names.lock().unwrap().addr_for(&name) else {
                net.count(|c| &c.dns_limited);
                return reply(q, ResponseCode::Refused);
            };
            let mut r = reply(q, ResponseCode::NoError);
            r.add_answer(Record::from_rdata(
                question.name().clone(),
                ANSWER_TTL,
                RData::A(A(addr)),
            ));
            r
        }
        Err(ResolveError::Budget) => {
            net.count(|c| &c.dns_limited);
            reply(q, ResponseCode::Refused)
        }
        Err(ResolveError::Upstream) => reply(q, ResponseCode::ServFail),
    }
}

/// Serve queries arriving on `sock` until `cancel`.
pub async fn serve(sock: UdpSocket, net: Arc<SandboxNet>, cancel: CancellationToken) {
    let sock = Arc::new(sock);
    let mut buf = vec![0u8; 4096];
    loop {
        let (n, from) = tokio::select! {
            _ = cancel.cancelled() => return,
            r = sock.recv_from(&mut buf) => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::debug!("egress dns recv: {e}");
                    continue;
                }
            },
        };
        let packet = buf[..n].to_vec();
        let (net, sock) = (net.clone(), sock.clone());
        // Each answer on its own task: a slow upstream does not hold up
        // answers from the cache or the hosts view.
        tokio::spawn(async move {
            if let Some(r) = answer(&net, &packet).await {
                let _ = sock.send_to(&r, from).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::names::is_synthetic;
    use crate::policy::Policy;
    use crate::sandbox::Counters;
    use crate::upstream::Upstream;
    use crate::Limits;
    use hickory_proto::op::Query;
    use hickory_proto::rr::Name;
    use stasis_core::manifest::NetworkPolicy;

    fn net(allow: &[&str], limits: Limits) -> SandboxNet {
        // Each test its own file: tests run side by side in one process, and
        // a shared file read while another test rewrites it reads empty.
        let dir = tempfile::tempdir().unwrap();
        let hosts = dir.path().join("hosts");
        std::fs::write(
            &hosts,
            "127.0.0.1 allowed.test other.allowed.test denied.test\n",
        )
        .unwrap();
        // An upstream nobody answers: only the hosts view resolves.
        let up = Upstream::new(Some(&hosts), Some("127.0.0.1:9".parse().unwrap())).unwrap();
        let p = NetworkPolicy {
            allow: allow.iter().map(|s| s.to_string()).collect(),
            deny: vec![],
        };
        SandboxNet::new(
            Policy::new(&p, Arc::new(crate::policy::Operator::open())).unwrap(),
            Arc::new(up),
            &limits,
            Arc::new(Counters::default()),
        )
    }

    fn query(name: &str, ty: RecordType) -> Vec<u8> {
        let mut m = Message::new();
        m.set_id(77)
            .set_message_type(MessageType::Query)
            .set_recursion_desired(true)
            .add_query(Query::query(Name::from_ascii(name).unwrap(), ty));
        m.to_vec().unwrap()
    }

    async fn ask(n: &SandboxNet, name: &str, ty: RecordType) -> Message {
        let r = answer(n, &query(name, ty)).await.unwrap();
        let m = Message::from_vec(&r).unwrap();
        assert_eq!(m.id(), 77);
        m
    }

    #[tokio::test]
    async fn answers_follow_the_policy() {
        let n = net(&["allowed.test", "*.allowed.test"], Limits::default());
        let m = ask(&n, "Allowed.Test.", RecordType::A).await;
        assert_eq!(m.response_code(), ResponseCode::NoError);
        let RData::A(a) = m.answers()[0].data() else {
            panic!("{m:?}")
        };
        assert!(is_synthetic(a.0));
        assert_eq!(n.names.lock().unwrap().name_of(a.0), Some("allowed.test"));
        let m = ask(&n, "other.allowed.test.", RecordType::A).await;
        assert_eq!(m.answers().len(), 1);
        let m = ask(&n, "denied.test.", RecordType::A).await;
        assert_eq!(m.response_code(), ResponseCode::NXDomain);
        let m = ask(&n, "allowed.test.", RecordType::AAAA).await;
        assert_eq!(m.response_code(), ResponseCode::NoError);
        assert!(m.answers().is_empty());
        let m = ask(&n, "x.y.allowed.test.", RecordType::A).await;
        assert_eq!(m.response_code(), ResponseCode::NXDomain);
        // Garbage and responses are dropped.
        assert!(answer(&n, b"\x00\x01garbage").await.is_none());
        let c = n.counters.values();
        assert_eq!(
            (c.dns_queries, c.dns_refused, c.upstream_queries),
            (5, 2, 0)
        );
    }

    #[tokio::test]
    async fn rate_limit_refuses() {
        let limits = Limits {
            dns_burst: 3,
            dns_per_sec: 1,
            ..Limits::default()
        };
        let n = net(&["allowed.test"], limits);
        let mut codes = Vec::new();
        for _ in 0..5 {
            codes.push(
                ask(&n, "allowed.test.", RecordType::A)
                    .await
                    .response_code(),
            );
        }
        assert_eq!(&codes[..3], &[ResponseCode::NoError; 3]);
        assert_eq!(codes[4], ResponseCode::Refused);
        assert!(n.counters.values().dns_limited >= 1);
    }
}
