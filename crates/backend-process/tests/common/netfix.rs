//! Network fixture for egress tests: listeners on the host's loopback and in
//! a network namespace the test creates (reached from the host through a
//! veth pair), plus a probe script that tries TCP, UDP and ICMP.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener};
use std::process::{Child, Command, Stdio};

/// Python probe: each argv entry is `tcp:IP:PORT`, `udp:IP:PORT` or
/// `icmp:IP`; all run at once, each prints `<entry> ok <reply>` or
/// `<entry> fail <why>`. A TCP check passes only when the listener's
/// greeting arrives; UDP only when the datagram comes back unchanged; ICMP only on an
/// echo reply from the target.
pub const PROBE: &str = r#"
import socket, struct, sys, threading, os
T = 4.0
res = {}
def tcp(ip, port):
    s = socket.create_connection((ip, int(port)), timeout=T)
    s.settimeout(T)
    d = s.recv(64).decode().strip()
    if not d:
        raise ConnectionError("closed without a greeting")
    return d
def udp(ip, port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.settimeout(T)
    q = b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03com\x00\x00\x01\x00\x01"
    s.sendto(q, (ip, int(port)))
    d, a = s.recvfrom(512)
    if d != q:
        raise ConnectionError("answered by something other than the echo (a resolver in between)")
    return "echo %d bytes" % len(d)
def csum(b):
    if len(b) % 2: b += b"\0"
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    s = (s >> 16) + (s & 0xffff); s += s >> 16
    return ~s & 0xffff
def icmp(ip):
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.settimeout(T)
    ident = os.getpid() & 0xffff
    h = struct.pack("!BBHHH", 8, 0, 0, ident, 1) + b"stasis"
    h = struct.pack("!BBHHH", 8, 0, csum(h), ident, 1) + b"stasis"
    s.sendto(h, (ip, 0))
    while True:
        d, a = s.recvfrom(1024)
        ihl = (d[0] & 15) * 4
        t, c, _, i, _ = struct.unpack("!BBHHH", d[ihl:ihl + 8])
        if a[0] == ip and t == 0 and i == ident:
            return "echo reply"
def one(spec):
    p = spec.split(":")
    try:
        r = {"tcp": tcp, "udp": udp, "icmp": icmp}[p[0]](*p[1:])
        res[spec] = "ok " + r
    except Exception as e:
        res[spec] = "fail " + type(e).__name__ + ": " + str(e)
ts = [threading.Thread(target=one, args=(a,)) for a in sys.argv[1:]]
for t in ts: t.start()
for t in ts: t.join()
for a in sys.argv[1:]: print(a, res[a])
"#;

/// Server run inside the test namespace: TCP greeters and a UDP echo.
const SERVER: &str = r#"
import socket, sys, threading
def tcp(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(64)
    while True:
        c, _ = s.accept()
        try: c.sendall(b"ns-%d\n" % port); c.close()
        except Exception: pass
def udp(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", port))
    while True:
        d, a = s.recvfrom(512); s.sendto(d, a)
for p in (8001, 8002):
    threading.Thread(target=tcp, args=(p,), daemon=True).start()
threading.Thread(target=udp, args=(53,), daemon=True).start()
print("ready", flush=True)
threading.Event().wait()
"#;

pub struct NetFixture {
    pub ns: String,
    pub host_if: String,
    pub host_ip: Ipv4Addr,
    pub ns_ip: Ipv4Addr,
    /// Ports of the namespace's TCP greeters (one to allow, one not) and UDP echo.
    pub ns_tcp_allowed: u16,
    pub ns_tcp_denied: u16,
    pub ns_udp: u16,
    /// Host loopback listeners (one to allow, one not); both greet.
    pub lo_allowed: u16,
    pub lo_denied: u16,
    server: Option<Child>,
}

fn sh(cmd: &str) {
    let st = Command::new("sh").args(["-c", cmd]).status().unwrap();
    assert!(st.success(), "{cmd}");
}

fn greeter(tag: &'static str) -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let _ = c.write_all(format!("{tag}\n").as_bytes());
        }
    });
    port
}

impl NetFixture {
    pub fn new(tag: &str) -> NetFixture {
        let n =
            (std::process::id() as u64 * 31 + tag.bytes().map(|b| b as u64).sum::<u64>()) % 16000;
        let base = u32::from(Ipv4Addr::new(10, 214, 0, 0)) + (n as u32) * 4;
        let (host_ip, ns_ip) = (Ipv4Addr::from(base + 1), Ipv4Addr::from(base + 2));
        let ns = format!("stxt{n}");
        let host_if = format!("stxth{n}");
        let _ = Command::new("ip").args(["netns", "del", &ns]).status();
        let _ = Command::new("ip").args(["link", "del", &host_if]).status();
        sh(&format!(
            "ip netns add {ns} && ip link add {host_if} type veth peer name eth0 netns {ns} && \
             ip addr add {host_ip}/30 dev {host_if} && ip link set {host_if} up && \
             echo 1 > /proc/sys/net/ipv4/conf/{host_if}/forwarding && \
             ip netns exec {ns} ip addr add {ns_ip}/30 dev eth0 && \
             ip netns exec {ns} ip link set eth0 up && ip netns exec {ns} ip link set lo up && \
             ip netns exec {ns} ip route add default via {host_ip}"
        ));
        let mut server = Command::new("ip")
            .args(["netns", "exec", &ns, "/usr/bin/python3", "-c", SERVER])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let mut buf = [0u8; 6];
        server
            .stdout
            .as_mut()
            .unwrap()
            .read_exact(&mut buf)
            .unwrap();
        assert_eq!(&buf, b"ready\n");
        NetFixture {
            ns,
            host_if,
            host_ip,
            ns_ip,
            ns_tcp_allowed: 8001,
            ns_tcp_denied: 8002,
            ns_udp: 53,
            lo_allowed: greeter("lo-allowed"),
            lo_denied: greeter("lo-denied"),
            server: Some(server),
        }
    }

    /// The manifest allowlist: one loopback port, one namespace port.
    pub fn allow(&self) -> Vec<String> {
        vec![
            format!("127.0.0.1:{}", self.lo_allowed),
            format!("{}:{}", self.ns_ip, self.ns_tcp_allowed),
        ]
    }

    /// The `stasis serve` flags that open what the allowlist names: egress
    /// refuses private ranges and the host's loopback unless the operator
    /// opens them.
    pub fn daemon_flags(&self) -> Vec<String> {
        vec![
            "--egress-allow-private".into(),
            "--egress-expose".into(),
            format!("127.0.0.1:{}", self.lo_allowed),
        ]
    }

    /// Probe entries that must succeed from an allowed sandbox.
    pub fn allowed_checks(&self) -> Vec<String> {
        vec![
            format!("tcp:127.0.0.1:{}", self.lo_allowed),
            format!("tcp:{}:{}", self.ns_ip, self.ns_tcp_allowed),
        ]
    }

    /// Probe entries that must fail, with what each one tries.
    pub fn denied_checks(&self, sandbox_gw: Option<Ipv4Addr>) -> Vec<(String, String)> {
        let mut v = vec![
            (
                format!("tcp:127.0.0.1:{}", self.lo_denied),
                "egress to a non-allowlisted host loopback port".to_string(),
            ),
            (
                format!("tcp:{}:{}", self.ns_ip, self.ns_tcp_denied),
                "egress to a non-allowlisted port of an allowlisted address".to_string(),
            ),
            (
                format!("tcp:{}:{}", self.host_ip, self.lo_denied),
                "egress to another host address".to_string(),
            ),
            (
                format!("udp:{}:{}", self.ns_ip, self.ns_udp),
                "UDP (DNS query) to a reachable resolver-like echo".to_string(),
            ),
            (format!("icmp:{}", self.ns_ip), "ICMP echo".to_string()),
        ];
        if let Some(gw) = sandbox_gw {
            v.push((
                format!("tcp:{gw}:{}", self.lo_denied),
                "egress to the host's own veth address, non-allowlisted port".to_string(),
            ));
            v.push((format!("icmp:{gw}"), "ICMP echo to the host".to_string()));
        }
        v
    }

    /// Run the probe on the host itself (controls: UDP and ICMP checks must
    /// work where nothing blocks them, so their failure in a sandbox means
    /// something).
    pub fn probe_on_host(&self, checks: &[String]) -> String {
        let out = Command::new("/usr/bin/python3")
            .arg("-c")
            .arg(PROBE)
            .args(checks)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

impl Drop for NetFixture {
    fn drop(&mut self) {
        if let Some(mut s) = self.server.take() {
            let _ = s.kill();
            let _ = s.wait();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).status();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .status();
    }
}

/// Parse the probe's output: entry -> passed.
pub fn probe_results(out: &str) -> std::collections::BTreeMap<String, (bool, String)> {
    out.lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ' ');
            let k = it.next()?.to_string();
            let ok = it.next()? == "ok";
            Some((k, (ok, it.next().unwrap_or("").to_string())))
        })
        .collect()
}
