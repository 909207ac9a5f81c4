//! The egress service end to end, on loopback, as root: a network namespace
//! made by the test stands in for a sandbox; a local HTTPS server and an
//! HTTP server stand in for the Internet, reached through a hosts view in
//! which allowed.test, other.allowed.test and denied.test all name
//! 127.0.0.1; a fake upstream DNS server counts what reaches it.

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use stasis_backend::{netns, Egress};
use stasis_core::manifest::NetworkPolicy;
use stasis_core::SandboxId;
use stasis_net::{EgressConfig, EgressService, Limits};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;

fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// A fresh network namespace, held open by a file.
fn new_netns() -> File {
    std::thread::spawn(|| {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
        File::open("/proc/thread-self/ns/net").unwrap()
    })
    .join()
    .unwrap()
}

async fn serve_http(l: tokio::net::TcpListener, tls: Option<tokio_rustls::TlsAcceptor>) {
    loop {
        let Ok((s, _)) = l.accept().await else { return };
        let tls = tls.clone();
        tokio::spawn(async move {
            let reply = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello";
            let mut buf = vec![0u8; 4096];
            match tls {
                Some(t) => {
                    let Ok(mut s) = t.accept(s).await else { return };
                    let _ = s.read(&mut buf).await;
                    let _ = s.write_all(reply).await;
                    let _ = s.shutdown().await;
                }
                None => {
                    let mut s = s;
                    let _ = s.read(&mut buf).await;
                    let _ = s.write_all(reply).await;
                }
            }
        });
    }
}

/// An HTTPS and an HTTP server on 127.0.0.1; their ports.
async fn servers() -> (u16, u16) {
    let names = ["allowed.test", "other.allowed.test", "denied.test"];
    let ck =
        rcgen::generate_simple_self_signed(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(ck.key_pair.serialize_der().into());
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![ck.cert.der().clone()], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let tls = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let ports = (
        tls.local_addr().unwrap().port(),
        http.local_addr().unwrap().port(),
    );
    tokio::spawn(serve_http(tls, Some(acceptor)));
    tokio::spawn(serve_http(http, None));
    ports
}

/// A DNS server that answers NXDOMAIN to everything and counts questions.
async fn fake_upstream() -> (SocketAddr, Arc<AtomicU64>) {
    let s = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = s.local_addr().unwrap();
    let n = Arc::new(AtomicU64::new(0));
    let count = n.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 4096];
        while let Ok((len, from)) = s.recv_from(&mut buf).await {
            count.fetch_add(1, Ordering::Relaxed);
            if let Ok(q) = Message::from_vec(&buf[..len]) {
                let mut r = Message::new();
                r.set_id(q.id())
                    .set_message_type(MessageType::Response)
                    .set_response_code(ResponseCode::NXDomain)
                    .add_queries(q.queries().iter().cloned());
                let _ = s.send_to(&r.to_vec().unwrap(), from).await;
            }
        }
    });
    (addr, n)
}

const CLIENT: &str = r#"
import socket, ssl, sys
name, port, host, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
try:
    addr = socket.getaddrinfo(name, port, socket.AF_INET, socket.SOCK_STREAM)[0][4]
except socket.gaierror as e:
    print("DNSFAIL", e); sys.exit(0)
try:
    s = socket.create_connection(addr, timeout=5)
    if mode == "tls":
        ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
        s = ctx.wrap_socket(s, server_hostname=host)
    if mode != "raw":
        s.sendall(b"GET / HTTP/1.1\r\nHost: " + host.encode() + b"\r\nConnection: close\r\n\r\n")
    data = s.recv(1000)
    print(("OK " if b"hello" in data else "NODATA ") + addr[0])
except Exception as e:
    print("CONNFAIL", type(e).__name__, addr[0])
"#;

/// Run the client inside `ns`; its one line of output.
async fn client(ns: &File, name: &str, port: u16, host: &str, mode: &str) -> String {
    let ns = ns.try_clone().unwrap();
    let args: Vec<String> = [name, &port.to_string(), host, mode]
        .iter()
        .map(|s| s.to_string())
        .collect();
    tokio::task::spawn_blocking(move || {
        netns::run_in(&ns, move || {
            std::process::Command::new("python3")
                .arg("-c")
                .arg(CLIENT)
                .args(&args)
                .output()
        })
    })
    .await
    .unwrap()
    .map(|o| {
        let out = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if out.is_empty() {
            String::from_utf8_lossy(&o.stderr).to_string()
        } else {
            out
        }
    })
    .unwrap()
}

fn policy(allow: &[String], deny: &[&str]) -> NetworkPolicy {
    NetworkPolicy {
        allow: allow.to_vec(),
        deny: deny.iter().map(|s| s.to_string()).collect(),
    }
}

fn hosts_file() -> tempfile::TempPath {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        f.path(),
        "127.0.0.1 allowed.test other.allowed.test denied.test\n",
    )
    .unwrap();
    f.into_temp_path()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_sni_host_deny_and_runtime_change() {
    if !is_root() {
        eprintln!("skipped: needs root (network namespaces)");
        return;
    }
    let (tls, http) = servers().await;
    let hosts = hosts_file();
    let svc = EgressService::new(EgressConfig {
        deny: vec!["169.254.169.254".into()],
        hosts: Some(hosts.to_path_buf()),
        // Unanswered: names outside the hosts view never resolve.
        upstream: Some("127.0.0.1:9".parse().unwrap()),
        limits: Limits::default(),
        // The test servers stand on the host's loopback.
        expose: vec!["127.0.0.1".into()],
        ..Default::default()
    })
    .unwrap();
    let id = SandboxId::generate();
    let ns = new_netns();
    let allow = vec![
        "allowed.test".to_string(),
        "*.allowed.test".to_string(),
        format!("127.0.0.1:{http}"),
    ];
    svc.attach(&id, &ns, &policy(&allow, &[])).unwrap();

    // Allowed names reach the server, over TLS and plain HTTP.
    let r = client(&ns, "allowed.test", tls, "allowed.test", "tls").await;
    assert!(r.starts_with("OK 198.1"), "{r}");
    let synthetic = r.split_whitespace().nth(1).unwrap().to_string();
    let r = client(&ns, "other.allowed.test", tls, "other.allowed.test", "tls").await;
    assert!(r.starts_with("OK "), "wildcard: {r}");
    let r = client(&ns, "allowed.test", http, "allowed.test", "http").await;
    assert!(r.starts_with("OK "), "http: {r}");

    // The denied name fails at DNS ...
    let r = client(&ns, "denied.test", tls, "denied.test", "tls").await;
    assert!(r.starts_with("DNSFAIL"), "{r}");
    // ... and dialled by an allowed name's address, at the SNI check.
    let r = client(&ns, &synthetic, tls, "denied.test", "tls").await;
    assert!(r.starts_with("CONNFAIL"), "denied SNI: {r}");
    // Plain HTTP with a denied Host, and raw TCP by name, are refused.
    let r = client(&ns, &synthetic, http, "denied.test", "http").await;
    assert!(r.starts_with("NODATA") || r.starts_with("CONNFAIL"), "{r}");
    // An address the resolver never gave out.
    let r = client(&ns, "198.18.0.77", tls, "allowed.test", "tls").await;
    assert!(r.starts_with("CONNFAIL"), "{r}");
    // A host loopback entry by address; another host port is not reachable
    // (127.0.0.1 without an entry stays on the sandbox's own loopback).
    let r = client(&ns, "127.0.0.1", http, "x", "http").await;
    assert!(r.starts_with("OK "), "loopback entry: {r}");
    let r = client(&ns, "127.0.0.1", tls, "allowed.test", "tls").await;
    assert!(r.starts_with("CONNFAIL"), "{r}");
    // The proxy's own socket is no way around the rules.
    let (proxy, _) = svc.ports(&id).unwrap();
    let r = client(&ns, "127.0.0.1", proxy, "allowed.test", "http").await;
    assert!(r.starts_with("NODATA") || r.starts_with("CONNFAIL"), "{r}");
    let c = svc.counters(&id).unwrap();
    assert!(c.allowed >= 4 && c.denied >= 4, "{c:?}");

    // Runtime change: deny wins over allow, by DNS and by a cached address.
    let other_addr = client(
        &ns,
        "other.allowed.test",
        http,
        "other.allowed.test",
        "http",
    )
    .await;
    let other_addr = other_addr.split_whitespace().nth(1).unwrap().to_string();
    svc.update(&id, &policy(&allow, &["other.allowed.test"]))
        .unwrap();
    let r = client(&ns, "other.allowed.test", tls, "other.allowed.test", "tls").await;
    assert!(r.starts_with("DNSFAIL"), "{r}");
    let r = client(&ns, &other_addr, tls, "other.allowed.test", "tls").await;
    assert!(r.starts_with("CONNFAIL"), "{r}");
    let r = client(&ns, "allowed.test", tls, "allowed.test", "tls").await;
    assert!(r.starts_with("OK "), "{r}");
    // Dropping the loopback entry at runtime closes that port too.
    svc.update(&id, &policy(&allow[..2], &[])).unwrap();
    let r = client(&ns, "127.0.0.1", http, "x", "http").await;
    assert!(r.starts_with("CONNFAIL"), "{r}");
    // Bad policies are refused by name of field, the old one stays.
    let e = svc
        .update(&id, &policy(&["*.com".to_string()], &[]))
        .unwrap_err();
    assert_eq!(e.field.as_deref(), Some("network.allow[0]"));

    // UDP other than DNS does not leave.
    let out = netns::run_in(&ns, || {
        let s = std::net::UdpSocket::bind("0.0.0.0:0")?;
        Ok(s.send_to(b"x", "1.2.3.4:99").map(|_| ()))
    })
    .unwrap();
    assert!(out.is_err(), "UDP left the namespace");

    // Attaching the same namespace again keeps the proxy and its sockets
    // (a thaw) and applies the policy given.
    let before = svc.ports(&id);
    svc.attach(&id, &ns, &policy(&allow, &["allowed.test"]))
        .unwrap();
    assert_eq!(svc.ports(&id), before);
    let r = client(&ns, "allowed.test", tls, "allowed.test", "tls").await;
    assert!(r.starts_with("DNSFAIL"), "{r}");

    // A new attach (a resume, restore or daemon restart) starts a new
    // table: an address the sandbox cached from before still works for its
    // own name, and opens no other.
    svc.detach(&id);
    svc.attach(&id, &ns, &policy(&allow, &[])).unwrap();
    let r = client(&ns, &synthetic, tls, "other.allowed.test", "tls").await;
    assert!(
        r.starts_with("CONNFAIL"),
        "another name at a cached address: {r}"
    );
    let r = client(&ns, &synthetic, tls, "allowed.test", "tls").await;
    assert!(r.starts_with("OK "), "cached address after re-attach: {r}");
    let r = client(&ns, "allowed.test", http, "allowed.test", "http").await;
    assert_eq!(r, format!("OK {synthetic}"), "same address by DNS: {r}");

    // Detach: nothing answers any more.
    svc.detach(&id);
    assert!(!svc.is_attached(&id));
    let r = client(&ns, "allowed.test", tls, "allowed.test", "tls").await;
    assert!(!r.starts_with("OK"), "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_deny_covers_real_addresses() {
    if !is_root() {
        eprintln!("skipped: needs root (network namespaces)");
        return;
    }
    let (tls, _) = servers().await;
    let hosts = hosts_file();
    let svc = EgressService::new(EgressConfig {
        deny: vec!["127.0.0.0/8".into()],
        hosts: Some(hosts.to_path_buf()),
        upstream: Some("127.0.0.1:9".parse().unwrap()),
        limits: Limits::default(),
        // The test servers stand on the host's loopback.
        expose: vec!["127.0.0.1".into()],
        ..Default::default()
    })
    .unwrap();
    let id = SandboxId::generate();
    let ns = new_netns();
    svc.attach(&id, &ns, &policy(&["allowed.test".into()], &[]))
        .unwrap();
    // The name resolves (to its synthetic address), but its real address is
    // in the operator's deny list.
    let r = client(&ns, "allowed.test", tls, "allowed.test", "tls").await;
    assert!(r.starts_with("CONNFAIL") && r.contains(" 198.1"), "{r}");
    svc.detach(&id);
}

/// Without an operator exposure the host is never reached, whatever the
/// tenant's policy holds (set before this rule, or by a name whose answer
/// changed since): a name whose real address is loopback, and a loopback
/// entry, connect to nothing; the firewall does not even redirect the
/// loopback entry off the sandbox's own `lo`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hosts_loopback_is_refused_at_connect_time() {
    if !is_root() {
        eprintln!("skipped: needs root (network namespaces)");
        return;
    }
    let (tls, http) = servers().await;
    let hosts = hosts_file();
    let svc = EgressService::new(EgressConfig {
        hosts: Some(hosts.to_path_buf()),
        upstream: Some("127.0.0.1:9".parse().unwrap()),
        ..Default::default()
    })
    .unwrap();
    let id = SandboxId::generate();
    let ns = new_netns();
    let allow = vec![
        "allowed.test".to_string(),
        format!("127.0.0.1:{http}"),
        "0.0.0.0/0".to_string(),
    ];
    svc.attach(&id, &ns, &policy(&allow, &[])).unwrap();
    let r = client(&ns, "allowed.test", tls, "allowed.test", "tls").await;
    assert!(r.starts_with("CONNFAIL") && r.contains(" 198.1"), "{r}");
    let r = client(&ns, "allowed.test", http, "allowed.test", "http").await;
    assert!(!r.starts_with("OK"), "{r}");
    let r = client(&ns, "127.0.0.1", http, "allowed.test", "http").await;
    assert!(!r.starts_with("OK"), "{r}");
    let c = svc.counters(&id).unwrap();
    assert_eq!(c.allowed, 0, "{c:?}");
    assert!(c.denied >= 2, "{c:?}");
    svc.detach(&id);
}

/// Ask the sandbox's resolver (through the firewall) one A question.
fn ask(sock: &std::net::UdpSocket, name: &str, id: u16) -> Option<ResponseCode> {
    let mut m = Message::new();
    m.set_id(id)
        .set_message_type(MessageType::Query)
        .add_query(Query::query(Name::from_ascii(name).unwrap(), RecordType::A));
    sock.send(&m.to_vec().unwrap()).ok()?;
    let mut buf = [0u8; 1500];
    let n = sock.recv(&mut buf).ok()?;
    Some(Message::from_vec(&buf[..n]).ok()?.response_code())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tunnelling_flood_stays_within_the_upstream_budget() {
    if !is_root() {
        eprintln!("skipped: needs root (network namespaces)");
        return;
    }
    let (up, seen) = fake_upstream().await;
    let limits = Limits {
        dns_burst: 100,
        dns_per_sec: 50,
        upstream_burst: 10,
        upstream_per_sec: 2,
        ..Limits::default()
    };
    let svc = EgressService::new(EgressConfig {
        deny: vec![],
        hosts: None,
        upstream: Some(up),
        limits,
        ..Default::default()
    })
    .unwrap();
    let id = SandboxId::generate();
    let ns = new_netns();
    svc.attach(&id, &ns, &policy(&["*.allowed.test".into()], &[]))
        .unwrap();
    let sock = netns::run_in(&ns, || {
        let s = std::net::UdpSocket::bind("0.0.0.0:0")?;
        s.connect("10.255.255.53:53")?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(s)
    })
    .unwrap();
    let started = Instant::now();
    let codes = tokio::task::spawn_blocking(move || {
        (0..300u16)
            .map(|i| ask(&sock, &format!("x{i:04x}data.allowed.test."), i))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap();
    let secs = started.elapsed().as_secs_f64();
    let nx = codes
        .iter()
        .filter(|c| **c == Some(ResponseCode::NXDomain))
        .count();
    let refused = codes
        .iter()
        .filter(|c| **c == Some(ResponseCode::Refused))
        .count();
    let upstream = seen.load(Ordering::Relaxed);
    println!("flood: 300 questions in {secs:.2}s, {nx} NXDOMAIN, {refused} REFUSED, {upstream} reached upstream");
    assert_eq!(nx + refused, 300, "{codes:?}");
    assert!(refused >= 200, "{refused}");
    let budget = 10.0 + 2.0 * secs + 1.0;
    assert!((upstream as f64) <= budget, "{upstream} > {budget}");
    let c = svc.counters(&id).unwrap();
    assert_eq!(c.upstream_queries, upstream);
    assert!(c.dns_limited as usize >= refused);
    svc.detach(&id);
}

#[test]
fn synthetic_range_is_not_loopback() {
    // The proxy tells synthetic addresses from real ones by range alone.
    assert!(!stasis_net::names::is_synthetic(Ipv4Addr::LOCALHOST));
}

/// Figures, not assertions: DNS answer latency through the firewall and the
/// resolver, and proxy throughput against a direct loopback connection.
/// `cargo test -p stasis-net --test egress -- --ignored --nocapture figures`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn figures() {
    if !is_root() {
        eprintln!("skipped: needs root (network namespaces)");
        return;
    }
    use std::io::{Read, Write};
    // A host server that sends `MB` MiB to whoever connects.
    const MB: usize = 256;
    let sink = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = sink.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut c in sink.incoming().flatten() {
            std::thread::spawn(move || {
                let buf = vec![7u8; 1 << 20];
                for _ in 0..MB {
                    if c.write_all(&buf).is_err() {
                        return;
                    }
                }
            });
        }
    });
    let hosts = hosts_file();
    let svc = EgressService::new(EgressConfig {
        deny: vec![],
        hosts: Some(hosts.to_path_buf()),
        upstream: Some("127.0.0.1:9".parse().unwrap()),
        limits: Limits {
            dns_burst: 1_000_000,
            dns_per_sec: 1_000_000,
            ..Limits::default()
        },
        expose: vec!["127.0.0.1".into()],
        ..Default::default()
    })
    .unwrap();
    let id = SandboxId::generate();
    let ns = new_netns();
    let allow = vec!["allowed.test".to_string(), format!("127.0.0.1:{port}")];
    svc.attach(&id, &ns, &policy(&allow, &[])).unwrap();

    let sock = netns::run_in(&ns, || {
        let s = std::net::UdpSocket::bind("0.0.0.0:0")?;
        s.connect("10.255.255.53:53")?;
        s.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(s)
    })
    .unwrap();
    const N: u16 = 2000;
    let mut lat = tokio::task::spawn_blocking(move || {
        (0..N)
            .map(|i| {
                let t = Instant::now();
                assert_eq!(ask(&sock, "allowed.test.", i), Some(ResponseCode::NoError));
                t.elapsed().as_secs_f64() * 1e6
            })
            .collect::<Vec<f64>>()
    })
    .await
    .unwrap();
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)];
    println!(
        "dns: {N} A questions (hosts view) through firewall + resolver: p50 {:.0} us, p99 {:.0} us",
        pct(0.50),
        pct(0.99)
    );

    let read_all = |mut s: std::net::TcpStream| -> f64 {
        let t = Instant::now();
        let mut buf = vec![0u8; 1 << 20];
        let mut n = 0usize;
        while n < MB << 20 {
            let k = s.read(&mut buf).unwrap();
            assert!(k > 0, "closed after {n} bytes");
            n += k;
        }
        (MB as f64) / t.elapsed().as_secs_f64()
    };
    let direct = tokio::task::spawn_blocking(move || {
        read_all(std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
    })
    .await
    .unwrap();
    let ns2 = ns.try_clone().unwrap();
    let proxied = tokio::task::spawn_blocking(move || {
        let s = netns::connect_tcp(
            &ns2,
            SocketAddr::from((Ipv4Addr::LOCALHOST, port)),
            Duration::from_secs(5),
        )
        .unwrap();
        read_all(s)
    })
    .await
    .unwrap();
    println!(
        "proxy: {MB} MiB host->sandbox: direct {direct:.0} MiB/s, through the proxy {proxied:.0} MiB/s ({:.0}%)",
        100.0 * proxied / direct
    );
    svc.detach(&id);
}
