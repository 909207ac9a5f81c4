//! A small `Egress` for the VM tests. It records every attach and detach
//! (with the namespace's inode and what the sandbox's console held at
//! that moment), refuses the host's own namespace, and serves allow entries
//! on the host's loopback the way the real service does for a QEMU
//! namespace: a listener on the namespace's `127.0.0.1:P` (where slirp's
//! `10.0.2.2:P` lands) relays to the host's `127.0.0.1:P`. Nothing else is
//! served: every other destination has no route in the namespace.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use stasis_backend::Egress;
use stasis_core::manifest::NetworkPolicy;
use stasis_core::{Error, Result, SandboxId};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// (sandbox, namespace inode, console.log bytes at attach time)
    Attach(SandboxId, u64, u64),
    Detach(SandboxId),
}

struct Served {
    listeners: Vec<Arc<TcpListener>>,
    dns: Option<Arc<UdpSocket>>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

pub struct TestEgress {
    /// Where the sandbox directories are (for their console.log).
    pub sandboxes: PathBuf,
    pub events: Mutex<Vec<Event>>,
    /// DNS queries received on the namespace's 127.0.0.1:53 (each answered
    /// NXDOMAIN).
    pub dns_queries: Arc<Mutex<Vec<Vec<u8>>>>,
    served: Mutex<HashMap<SandboxId, Served>>,
}

pub fn ns_inode(path: &str) -> u64 {
    std::fs::metadata(path).unwrap().ino()
}

impl TestEgress {
    pub fn new(sandboxes: PathBuf) -> Arc<TestEgress> {
        Arc::new(TestEgress {
            sandboxes,
            events: Mutex::new(Vec::new()),
            dns_queries: Arc::default(),
            served: Mutex::new(HashMap::new()),
        })
    }

    pub fn events_of(&self, id: &SandboxId) -> Vec<Event> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| match e {
                Event::Attach(i, ..) | Event::Detach(i) => i == id,
            })
            .cloned()
            .collect()
    }

    fn stop(&self, id: &SandboxId) {
        if let Some(s) = self.served.lock().unwrap().remove(id) {
            s.stop.store(true, Ordering::SeqCst);
            for l in s.listeners {
                unsafe { libc::shutdown(l.as_raw_fd(), libc::SHUT_RDWR) };
            }
            if let Some(d) = s.dns {
                unsafe { libc::shutdown(d.as_raw_fd(), libc::SHUT_RDWR) };
            }
            // Until every thread has let go of its socket, the addresses
            // stay bound: a new attachment could not bind them.
            for t in s.threads {
                let _ = t.join();
            }
        }
    }
}

impl Egress for TestEgress {
    fn attach(&self, id: &SandboxId, netns: &std::fs::File, policy: &NetworkPolicy) -> Result<()> {
        let ino = netns.metadata()?.ino();
        if ino == ns_inode("/proc/self/ns/net") {
            return Err(Error::backend("attach was handed the host's namespace"));
        }
        let console = std::fs::metadata(self.sandboxes.join(id.as_str()).join("console.log"))
            .map(|m| m.len())
            .unwrap_or(0);
        self.events
            .lock()
            .unwrap()
            .push(Event::Attach(id.clone(), ino, console));
        self.stop(id);
        let stop = Arc::new(AtomicBool::new(false));
        let mut listeners = Vec::new();
        let mut threads = Vec::new();
        for a in &policy.allow {
            let Ok(dest) = a.parse::<SocketAddrV4>() else {
                continue;
            };
            if !dest.ip().is_loopback() {
                continue;
            }
            let port = dest.port();
            let l = stasis_backend::netns::run_in(netns, move || {
                TcpListener::bind(("127.0.0.1", port))
            })?;
            let l = Arc::new(l);
            let (l2, stop2) = (l.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                while !stop2.load(Ordering::SeqCst) {
                    let Ok((c, _)) = l2.accept() else { break };
                    std::thread::spawn(move || relay(c, dest));
                }
            }));
            listeners.push(l);
        }
        // Where slirp's DNS forwarder sends the guest's queries when QEMU
        // sees no resolv.conf (the jail has no /etc).
        let dns = stasis_backend::netns::run_in(netns, || UdpSocket::bind("127.0.0.1:53"))?;
        dns.set_read_timeout(Some(Duration::from_millis(200)))?;
        let dns = Arc::new(dns);
        let (d2, stop2, seen) = (dns.clone(), stop.clone(), self.dns_queries.clone());
        threads.push(std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            while !stop2.load(Ordering::SeqCst) {
                let Ok((n, from)) = d2.recv_from(&mut buf) else {
                    continue;
                };
                if n < 12 {
                    continue;
                }
                seen.lock().unwrap().push(buf[..n].to_vec());
                let mut reply = buf[..n].to_vec();
                reply[2] |= 0x80; // QR
                reply[3] = (reply[3] & 0xf0) | 3; // NXDOMAIN
                let _ = d2.send_to(&reply, from);
            }
        }));
        self.served.lock().unwrap().insert(
            id.clone(),
            Served {
                listeners,
                dns: Some(dns),
                stop,
                threads,
            },
        );
        Ok(())
    }

    fn detach(&self, id: &SandboxId) {
        self.events.lock().unwrap().push(Event::Detach(id.clone()));
        self.stop(id);
    }
}

fn relay(client: TcpStream, dest: SocketAddrV4) {
    let Ok(up) = TcpStream::connect_timeout(&dest.into(), Duration::from_secs(5)) else {
        return;
    };
    let (c2, u2) = (client.try_clone().unwrap(), up.try_clone().unwrap());
    let t = std::thread::spawn(move || pipe(c2, u2));
    pipe(up, client);
    let _ = t.join();
}

fn pipe(mut from: TcpStream, mut to: TcpStream) {
    let mut buf = [0u8; 8192];
    while let Ok(n) = from.read(&mut buf) {
        if n == 0 || to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
