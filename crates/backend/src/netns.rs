//! Doing one thing inside a sandbox's network namespace from the daemon.
//!
//! A socket belongs to the network namespace it was created in, whatever
//! thread later uses it. So the daemon can open a listener inside a
//! sandbox's namespace (the egress resolver and proxy) or connect to a port
//! the sandbox serves (exposed ports), then use that socket from its own
//! namespace. `run_in` creates such sockets on a short-lived thread that has
//! joined the namespace (`setns` changes only the calling thread), so no
//! runtime thread ever switches namespace.

use std::fs::File;
use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::time::Duration;

use nix::sched::{setns, CloneFlags};

/// The network namespace of process `pid`, opened (keeps the namespace
/// alive while the file is open).
pub fn open(pid: u32) -> io::Result<File> {
    File::open(format!("/proc/{pid}/ns/net"))
}

/// Run `f` on a new thread that has joined the network namespace `netns`.
pub fn run_in<T, F>(netns: &File, f: F) -> io::Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> io::Result<T> + Send + 'static,
{
    let ns = netns.try_clone()?;
    std::thread::Builder::new()
        .name("stasis-netns".into())
        .spawn(move || {
            setns(ns.as_fd(), CloneFlags::CLONE_NEWNET).map_err(io::Error::from)?;
            f()
        })?
        .join()
        .map_err(|_| io::Error::other("netns thread panicked"))?
}

/// Connect to `addr` as seen from inside `netns` (e.g. `127.0.0.1:8000`, a
/// server listening on the sandbox's own loopback), giving up after `timeout`.
pub fn connect_tcp(netns: &File, addr: SocketAddr, timeout: Duration) -> io::Result<TcpStream> {
    run_in(netns, move || TcpStream::connect_timeout(&addr, timeout))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    fn is_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    /// A new network namespace held open by a file (made on a thread that
    /// unshares and opens its own namespace).
    fn new_netns() -> File {
        std::thread::spawn(|| {
            nix::sched::unshare(CloneFlags::CLONE_NEWNET).unwrap();
            File::open("/proc/thread-self/ns/net").unwrap()
        })
        .join()
        .unwrap()
    }

    #[test]
    fn sockets_made_inside_stay_inside() {
        if !is_root() {
            eprintln!("skipped: needs root (setns)");
            return;
        }
        let ns = new_netns();
        // Loopback is down in a fresh namespace: bring it up from inside.
        run_in(&ns, || {
            let ok = std::process::Command::new("ip")
                .args(["link", "set", "lo", "up"])
                .status()?
                .success();
            ok.then_some(()).ok_or_else(|| io::Error::other("ip link"))
        })
        .unwrap();
        let listener = run_in(&ns, || TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        // The daemon's own namespace does not see it ...
        assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(300)).is_err());
        // ... a connection made inside does, and works from this thread.
        let mut c = connect_tcp(&ns, addr, Duration::from_secs(2)).unwrap();
        let (mut s, _) = listener.accept().unwrap();
        c.write_all(b"ping").unwrap();
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"ping");
    }

    #[test]
    fn a_closed_port_is_refused_not_hung() {
        if !is_root() {
            eprintln!("skipped: needs root (setns)");
            return;
        }
        let ns = new_netns();
        // lo down: nothing routes; the error comes back at once.
        let e = connect_tcp(&ns, "127.0.0.1:9".parse().unwrap(), Duration::from_secs(2));
        assert!(e.is_err());
    }
}
