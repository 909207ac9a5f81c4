//! Exposed ports of a microVM (`connect_port`): a TCP connection from the
//! daemon to a server listening in the guest.
//!
//! slirp forwards `net::PORT_ADDR:P` (`127.0.0.2`) in QEMU's private
//! network namespace to the guest's port P, added at run time with HMP
//! `hostfwd_add` the first time the port is asked for, and added again to
//! every new QEMU of the sandbox (resume) before its guest runs. The daemon
//! connects from a short-lived thread that joined that namespace
//! (`stasis_backend::netns::connect_tcp`); no other process on the host can
//! reach the listener, because no other process is in the namespace.
//!
//! slirp accepts the host side before it knows whether the guest accepts,
//! so "nothing listens" cannot be seen on the connection (it would only
//! close). The guest is asked first instead (the agent reads the file, no
//! process is started): its `/proc/net/tcp{,6}` must
//! show a listening socket on the port that slirp's connections (to the
//! guest's address `10.0.2.15`) reach. A server bound to the guest's
//! loopback only is reported as such: it cannot be reached from outside the
//! guest. Either failure is `port_unreachable` and leaves the guest as it
//! was.

use std::net::SocketAddr;
use std::time::Duration;

use stasis_backend::Backend;
use stasis_core::{Error, ErrorCode, Result, SandboxId};

use crate::net::{self, Nic};
use crate::qmp::Qmp;
use crate::state::{self, MicrovmBackend, Vm};

/// How long the daemon waits for slirp's listener to accept.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The most of a guest socket table read (about 150 bytes a socket).
const TABLE_LIMIT: u64 = 16 << 20;

/// Run an HMP command; its (non-empty) output is QEMU's complaint.
pub(crate) async fn hmp(qmp: &mut Qmp, cmd: &str) -> Result<String> {
    let v = qmp
        .execute(
            "human-monitor-command",
            Some(serde_json::json!({ "command-line": cmd })),
        )
        .await?;
    Ok(v.as_str().unwrap_or_default().to_string())
}

/// Forward `PORT_ADDR:port` in QEMU's namespace to the guest's `port`.
pub(crate) async fn add_forward(qmp: &mut Qmp, port: u16) -> Result<()> {
    let out = hmp(qmp, &net::hostfwd_add(port)).await?;
    if !out.trim().is_empty() {
        return Err(Error::backend(format!(
            "forwarding guest port {port}: QEMU says {}",
            out.trim()
        )));
    }
    Ok(())
}

/// The guest ports QEMU forwards now (`info usernet`).
pub(crate) async fn forwards(b: &MicrovmBackend, id: &SandboxId) -> Result<Vec<u16>> {
    let vm = state::vm(b, id)?;
    if vm.nic == Nic::None {
        return Ok(Vec::new());
    }
    let mut qmp = vm.qmp.lock().await;
    Ok(net::parse_usernet_forwards(
        &hmp(&mut qmp, "info usernet").await?,
    ))
}

/// What the guest's socket tables say about a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Listening {
    /// A listener slirp's connections reach (any address, or the NIC's).
    Reachable,
    /// Listeners only on the guest's loopback.
    LoopbackOnly,
    No,
}

/// Read `/proc/net/tcp` and `/proc/net/tcp6` text (concatenated) for
/// listening sockets (state `0A`) on `port`.
pub fn listening(text: &str, port: u16) -> Listening {
    // Local addresses as the kernel prints them (each 32-bit word in host,
    // here little-endian, order).
    const ANY4: &str = "00000000";
    const GUEST4: &str = "0F02000A"; // 10.0.2.15
    const ANY6: &str = "00000000000000000000000000000000";
    const GUEST6: &str = "0000000000000000FFFF00000F02000A"; // ::ffff:10.0.2.15
    const LO6: &str = "00000000000000000000000001000000"; // ::1
    let mut seen = Listening::No;
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 4 || f[3] != "0A" {
            continue;
        }
        let Some((addr, p)) = f[1].split_once(':') else {
            continue;
        };
        if u16::from_str_radix(p, 16).ok() != Some(port) {
            continue;
        }
        let addr = addr.to_ascii_uppercase();
        if [ANY4, GUEST4, ANY6, GUEST6].contains(&addr.as_str()) {
            return Listening::Reachable;
        }
        // 127.0.0.0/8 (the last byte printed is the first octet), or ::1.
        if (addr.len() == 8 && addr.ends_with("7F")) || addr == LO6 {
            seen = Listening::LoopbackOnly;
        }
    }
    seen
}

/// Ask the guest whether something listens on `port` where slirp reaches it
/// (its socket tables, read by the agent: no process is started).
async fn check_listening(b: &MicrovmBackend, vm: &Vm, port: u16) -> Result<()> {
    let mut text = String::new();
    for (path, required) in [("/proc/net/tcp", true), ("/proc/net/tcp6", false)] {
        match b.read_file(&vm.id, path, TABLE_LIMIT).await {
            Ok(t) => text.push_str(&String::from_utf8_lossy(&t)),
            // A guest without IPv6 has no tcp6 table.
            Err(_) if !required => {}
            Err(e) => return Err(e.context("reading the guest's socket table")),
        }
    }
    match listening(&text, port) {
        Listening::Reachable => Ok(()),
        Listening::LoopbackOnly => Err(Error::new(
            ErrorCode::PortUnreachable,
            format!(
                "port {port} in sandbox {} listens only on the guest's loopback; listen on 0.0.0.0 to expose it",
                vm.id
            ),
        )),
        Listening::No => Err(Error::new(
            ErrorCode::PortUnreachable,
            format!("nothing listens on port {port} in sandbox {}", vm.id),
        )),
    }
}

pub(crate) async fn connect_port(
    b: &MicrovmBackend,
    id: &SandboxId,
    port: u16,
) -> Result<tokio::net::TcpStream> {
    if port == 0 {
        return Err(Error::invalid("port must be 1-65535"));
    }
    let vm = state::vm(b, id)?;
    if vm.nic == Nic::None {
        return Err(Error::unsupported(format!(
            "sandbox {id} was restored from a snapshot whose guest has no network interface: it has no ports"
        )));
    }
    let Some(ns) = vm.netns.as_ref().map(|n| n.try_clone()).transpose()? else {
        return Err(Error::unsupported(
            "exposed ports need QEMU in its own network namespace (the jail of a root daemon)",
        ));
    };
    check_listening(b, &vm, port).await?;
    {
        let mut qmp = vm.qmp.lock().await;
        if !vm.ports.lock().unwrap().contains(&port) {
            add_forward(&mut qmp, port).await?;
            vm.ports.lock().unwrap().insert(port);
            b.ports
                .lock()
                .unwrap()
                .entry(id.clone())
                .or_default()
                .insert(port);
            state::write_record(&vm)?;
        }
    }
    let addr = SocketAddr::from((net::PORT_ADDR, port));
    let s = tokio::task::spawn_blocking(move || {
        stasis_backend::netns::connect_tcp(&ns, addr, CONNECT_TIMEOUT)
    })
    .await
    .map_err(|e| Error::internal(e.to_string()))?
    .map_err(|e| {
        Error::new(
            ErrorCode::PortUnreachable,
            format!("port {port} of sandbox {id}: QEMU's forward: {e}"),
        )
    })?;
    s.set_nonblocking(true)?;
    Ok(tokio::net::TcpStream::from_std(s)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:1388 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 100 0 0 10 0\n\
   2: 0F02000A:0050 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000 100 0 0 10 0\n\
   3: 0F02000A:1F41 0202000A:C350 01 00000000:00000000 00:00000000 00000000     0        0 4 1 0000000000000000 100 0 0 10 0\n";
    const TCP6: &str = "  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 00000000000000000000000000000000:0BB8 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 5 1 0000000000000000 100 0 0 10 0\n\
   1: 00000000000000000000000001000000:0FA0 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 6 1 0000000000000000 100 0 0 10 0\n";

    #[test]
    fn listeners_are_found_where_slirp_reaches_them() {
        let text = format!("{TCP}{TCP6}");
        assert_eq!(listening(&text, 8000), Listening::Reachable); // 0.0.0.0
        assert_eq!(listening(&text, 80), Listening::Reachable); // 10.0.2.15
        assert_eq!(listening(&text, 3000), Listening::Reachable); // [::]
        assert_eq!(listening(&text, 5000), Listening::LoopbackOnly); // 127.0.0.1
        assert_eq!(listening(&text, 4000), Listening::LoopbackOnly); // [::1]
                                                                     // An established connection is no listener; an absent port none.
        assert_eq!(listening(&text, 8001), Listening::No);
        assert_eq!(listening(&text, 9), Listening::No);
        assert_eq!(listening("", 8000), Listening::No);
        assert_eq!(listening("garbage\n1: x 0A\n", 8000), Listening::No);
    }
}
