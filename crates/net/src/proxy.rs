//! The per-sandbox TCP proxy: every TCP connection leaving the sandbox is
//! redirected here by the firewall.
//!
//! For each connection: read the destination the sandbox dialled
//! (`SO_ORIGINAL_DST`), then
//! - a synthetic address: map it back to the name the resolver gave it
//!   (after a re-attach, the name the first bytes ask for, if the address
//!   is that name's own: [`crate::names::Names::adopt`]),
//!   re-check the name against the policy now in force, read the first
//!   bytes and require a TLS ClientHello whose SNI, or an HTTP/1 request
//!   whose Host, the policy admits (one address cannot open a denied name;
//!   raw TCP is not admitted by name), resolve the name's real address
//!   from the daemon's namespace and dial it unless a deny list covers it;
//! - any other address: admitted only by a network entry (`ip`, CIDR,
//!   `ip:port`) and dialled as is (a loopback entry is the host's loopback).
//!
//! A connection made straight to the proxy's own socket has no NAT record
//! and is refused. Then bytes are spliced both ways until either side
//! closes or the sandbox is detached.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::names::is_synthetic;
use crate::sandbox::SandboxNet;
use crate::sniff::{sniff, Sniff, MAX_PEEK};

/// How long the first bytes (ClientHello, request head) may take.
const PEEK_TIMEOUT: Duration = Duration::from_secs(10);
/// How long dialling the real destination may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// The destination a redirected connection was addressed to.
pub fn original_dst(s: &TcpStream) -> std::io::Result<SocketAddrV4> {
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: `sa` is a writable sockaddr_in of `len` bytes.
    let r = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::SOL_IP,
            libc::SO_ORIGINAL_DST,
            &mut sa as *mut _ as *mut libc::c_void,
            &mut len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(SocketAddrV4::new(
        Ipv4Addr::from(u32::from_be(sa.sin_addr.s_addr)),
        u16::from_be(sa.sin_port),
    ))
}

/// Accept connections on `listener` until `cancel`.
pub async fn serve(listener: TcpListener, net: Arc<SandboxNet>, cancel: CancellationToken) {
    loop {
        let s = tokio::select! {
            _ = cancel.cancelled() => return,
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::debug!("egress proxy accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Ok(permit) = net.conns.clone().try_acquire_owned() else {
            net.count(|c| &c.denied);
            continue;
        };
        let (net, cancel) = (net.clone(), cancel.clone());
        tokio::spawn(async move {
            let _permit = permit;
            handle(s, net, cancel).await;
        });
    }
}

async fn handle(mut s: TcpStream, net: Arc<SandboxNet>, cancel: CancellationToken) {
    let (mut up, head) = match admit(&mut s, &net).await {
        Ok(x) => {
            net.count(|c| &c.allowed);
            x
        }
        Err(why) => {
            net.count(|c| &c.denied);
            tracing::debug!("egress refused: {why}");
            return;
        }
    };
    if up.write_all(&head).await.is_err() {
        return;
    }
    tokio::select! {
        _ = cancel.cancelled() => {}
        _ = tokio::io::copy_bidirectional(&mut s, &mut up) => {}
    }
}

/// Read until the first bytes say what the connection is.
async fn read_head(s: &mut TcpStream) -> Result<(Vec<u8>, Sniff), String> {
    let mut buf = Vec::with_capacity(1024);
    let deadline = tokio::time::Instant::now() + PEEK_TIMEOUT;
    loop {
        let mut chunk = [0u8; 4096];
        let n = tokio::time::timeout_at(deadline, s.read(&mut chunk))
            .await
            .map_err(|_| "no request within the peek timeout".to_string())?
            .map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("closed before a request".into());
        }
        buf.extend_from_slice(&chunk[..n]);
        match sniff(&buf) {
            Sniff::NeedMore if buf.len() < MAX_PEEK => continue,
            Sniff::NeedMore => return Ok((buf, Sniff::Unknown)),
            v => return Ok((buf, v)),
        }
    }
}

async fn dial(addr: SocketAddr) -> Result<TcpStream, String> {
    tokio::time::timeout(DIAL_TIMEOUT, TcpStream::connect(addr))
        .await
        .map_err(|_| format!("dial {addr}: timed out"))?
        .map_err(|e| format!("dial {addr}: {e}"))
}

/// Decide one connection; on success the upstream stream and the bytes
/// already read from the sandbox.
async fn admit(s: &mut TcpStream, net: &SandboxNet) -> Result<(TcpStream, Vec<u8>), String> {
    let orig = original_dst(s).map_err(|e| format!("no original destination: {e}"))?;
    let local = s.local_addr().map_err(|e| e.to_string())?;
    if SocketAddr::V4(orig) == local {
        return Err("connection made to the proxy itself".into());
    }
    let (ip, port) = (*orig.ip(), orig.port());
    if !is_synthetic(ip) {
        net.policy()
            .addr(IpAddr::V4(ip), port)
            .map_err(|r| format!("{orig}: {r:?}"))?;
        return Ok((dial(SocketAddr::V4(orig)).await?, Vec::new()));
    }
    let known = net.names.lock().unwrap().name_of(ip).map(str::to_string);
    if let Some(name) = &known {
        net.policy()
            .name(name, Some(port))
            .map_err(|r| format!("{name}:{port}: {r:?}"))?;
    }
    let label = known.clone().unwrap_or_else(|| ip.to_string());
    let (head, what) = read_head(s).await?;
    let asked = match what {
        Sniff::Tls(Some(h)) | Sniff::Http(Some(h)) => h,
        Sniff::Tls(None) => return Err(format!("{label}: TLS without a server name")),
        Sniff::Http(None) => return Err(format!("{label}: HTTP without a valid Host")),
        _ => {
            return Err(format!(
                "{label}: neither TLS nor HTTP (raw TCP needs an address entry)"
            ))
        }
    };
    // An address this attach never gave out may be an answer the sandbox
    // cached before a resume, restore or daemon restart: taken back only
    // for the name whose own address it is (see `Names::adopt`).
    let name = match known {
        Some(n) => n,
        None if net.names.lock().unwrap().adopt(&asked, ip) => asked.clone(),
        None => return Err(format!("{ip} was not given out by this sandbox's resolver")),
    };
    let policy = net.policy();
    policy
        .name(&asked, Some(port))
        .map_err(|r| format!("{name}: SNI/Host {asked}: {r:?}"))?;
    let addrs = net
        .resolve(&name)
        .await
        .map_err(|e| format!("{name}: resolve: {e:?}"))?;
    let real = addrs
        .into_iter()
        .find(|a| policy.real_addr(IpAddr::V4(*a), port).is_ok())
        .ok_or_else(|| format!("{name}: every address is denied"))?;
    Ok((dial(SocketAddr::from((real, port))).await?, head))
}
