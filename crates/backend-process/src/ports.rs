//! Exposed ports: a TCP connection to a server the sandbox runs on its own
//! loopback, for the daemon's port proxy. The connection is made from a
//! short-lived thread that has joined PID 1's network namespace
//! ([`stasis_backend::netns`]), so the socket lives inside that namespace
//! while the daemon uses it from its own. Every sandbox has that namespace
//! (loopback up) whether or not its manifest allows any egress, and nothing
//! on the host can reach its ports any other way.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use stasis_backend::netns;
use stasis_core::{Error, ErrorCode, Result};

use crate::sandbox::Sandbox;

/// How long a connection to the sandbox's loopback may take. Loopback
/// answers at once (accepted or refused); only a listener whose accept
/// queue is full makes a connect wait.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Connect to `127.0.0.1:port` inside the sandbox (running, not frozen).
pub(crate) async fn connect(sb: &Sandbox, port: u16) -> Result<tokio::net::TcpStream> {
    if port == 0 {
        return Err(Error::invalid("port: must be 1-65535").with_field("port"));
    }
    let pid = sb.pid().await?;
    let std_stream = tokio::task::spawn_blocking(move || {
        let ns = netns::open(pid as u32)?;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let s = netns::connect_tcp(&ns, addr, CONNECT_TIMEOUT)?;
        s.set_nodelay(true)?;
        s.set_nonblocking(true)?;
        Ok::<_, std::io::Error>(s)
    })
    .await
    .map_err(|e| Error::internal(format!("connect task: {e}")))?
    .map_err(|e| connect_error(port, e))?;
    tokio::net::TcpStream::from_std(std_stream)
        .map_err(|e| Error::internal(format!("port {port}: {e}")))
}

/// A failed connect: nothing listening (refused, timed out, unreachable)
/// is `port_unreachable`; a namespace that cannot be opened means the
/// sandbox's PID 1 went away under us.
fn connect_error(port: u16, e: std::io::Error) -> Error {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::ConnectionRefused | K::TimedOut | K::ConnectionReset | K::NetworkUnreachable => {
            Error::new(
                ErrorCode::PortUnreachable,
                format!("nothing is listening on port {port} in the sandbox ({e})"),
            )
        }
        K::NotFound => Error::state("sandbox is not running"),
        _ => Error::new(
            ErrorCode::PortUnreachable,
            format!("cannot connect to port {port} in the sandbox ({e})"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refused_and_gone_map_to_stable_codes() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(
            connect_error(8000, refused).code,
            ErrorCode::PortUnreachable
        );
        let timed_out = std::io::Error::from(std::io::ErrorKind::TimedOut);
        assert_eq!(
            connect_error(8000, timed_out).code,
            ErrorCode::PortUnreachable
        );
        let gone = std::io::Error::from(std::io::ErrorKind::NotFound);
        assert_eq!(connect_error(8000, gone).code, ErrorCode::InvalidState);
    }
}
