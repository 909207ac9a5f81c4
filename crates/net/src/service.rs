//! The egress service: [`stasis_backend::Egress`] for the daemon. One
//! resolver socket and one proxy listener per attached sandbox, created
//! inside its network namespace and served by tasks on the daemon's tokio
//! runtime; `update` swaps the policy of a running sandbox in place.

use std::collections::HashMap;
use std::fs::File;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use stasis_backend::{netns, Egress};
use stasis_core::manifest::network::Entry;
use stasis_core::manifest::NetworkPolicy;
use stasis_core::{Error, ErrorCode, Result, SandboxId};
use tokio_util::sync::CancellationToken;

use crate::firewall::{self, Ports};
use crate::guard::Guard;
use crate::policy::{operator_list, Operator, Policy};
use crate::sandbox::{CounterValues, Counters, SandboxNet};
use crate::upstream::Upstream;
use crate::{dns, proxy, Limits};

/// How the daemon runs egress (from `stasis serve` flags).
#[derive(Debug, Clone, Default)]
pub struct EgressConfig {
    /// Operator deny list (`--egress-deny`), applied on top of every
    /// sandbox's policy; tenants cannot override it. The guard's ranges
    /// (see [`crate::guard`]) apply whatever it holds.
    pub deny: Vec<String>,
    /// Let sandboxes reach private ranges (`--egress-allow-private`).
    pub allow_private: bool,
    /// Host destinations the operator opens (`--egress-expose`): addresses
    /// or networks with an optional port, never the daemon's own.
    pub expose: Vec<String>,
    /// The daemon's listen addresses (filled in by the daemon).
    pub listen: Vec<SocketAddr>,
    /// DNS server the daemon asks (`--egress-upstream`); default: the
    /// system resolver.
    pub upstream: Option<SocketAddr>,
    /// Hosts view consulted first (`--egress-hosts`).
    pub hosts: Option<PathBuf>,
    pub limits: Limits,
}

struct Attached {
    net: Arc<SandboxNet>,
    netns: File,
    ports: Ports,
    cancel: CancellationToken,
}

pub struct EgressService {
    operator: Arc<Operator>,
    upstream: Arc<Upstream>,
    limits: Limits,
    rt: tokio::runtime::Handle,
    totals: Arc<Counters>,
    sandboxes: Mutex<HashMap<SandboxId, Attached>>,
}

impl EgressService {
    /// Build the service; call inside the daemon's tokio runtime.
    pub fn new(cfg: EgressConfig) -> Result<EgressService> {
        let rt = tokio::runtime::Handle::try_current()
            .map_err(|_| Error::new(ErrorCode::Internal, "egress service needs a tokio runtime"))?;
        let expose = cfg
            .expose
            .iter()
            .map(|e| {
                match Entry::parse(e) {
                    Ok(n @ Entry::Net { .. }) => Ok(n),
                    Ok(_) => Err("an address or network, with an optional :port".to_string()),
                    Err(m) => Err(m),
                }
                .map_err(|m| {
                    Error::new(
                        ErrorCode::InvalidArgument,
                        format!("egress expose entry {e:?}: {m}"),
                    )
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let operator = Operator {
            deny: operator_list(&cfg.deny)?,
            guard: Guard::new(cfg.allow_private, expose, cfg.listen.clone()),
        };
        Ok(EgressService {
            operator: Arc::new(operator),
            upstream: Arc::new(Upstream::new(cfg.hosts.as_deref(), cfg.upstream)?),
            limits: cfg.limits,
            rt,
            totals: Arc::new(Counters::default()),
            sandboxes: Mutex::new(HashMap::new()),
        })
    }

    /// Check a tenant's `p` before it is stored (at create and at a
    /// runtime change): the manifest's rules, then every allow entry
    /// against the operator's guard ([`crate::validate`]).
    pub async fn check(&self, p: &NetworkPolicy) -> Result<()> {
        crate::validate::check(p, &self.operator.guard, &self.upstream).await
    }

    /// Apply `p` to the attached sandbox `id` without restarting it
    /// (connections already open stay open). Not attached: nothing to do,
    /// the policy applies at the next attach.
    pub fn update(&self, id: &SandboxId, p: &NetworkPolicy) -> Result<()> {
        let policy = Policy::new(p, self.operator.clone())?;
        let map = self.sandboxes.lock().unwrap();
        let Some(a) = map.get(id) else {
            return Ok(());
        };
        let ports = Ports {
            loopback: policy.loopback_ports(),
            ..a.ports.clone()
        };
        if ports != a.ports {
            firewall::reload(&a.netns, &ports)
                .map_err(|e| Error::backend(format!("sandbox firewall: {e}")))?;
        }
        *a.net.policy.write().unwrap() = Arc::new(policy);
        Ok(())
    }

    /// Counters of an attached sandbox.
    pub fn counters(&self, id: &SandboxId) -> Option<CounterValues> {
        let map = self.sandboxes.lock().unwrap();
        map.get(id).map(|a| a.net.counters.values())
    }

    /// Counters summed over every sandbox since the daemon started.
    pub fn totals(&self) -> CounterValues {
        self.totals.values()
    }

    /// The proxy's and the resolver's ports inside the sandbox's
    /// namespace (127.0.0.1), for diagnostics and tests.
    pub fn ports(&self, id: &SandboxId) -> Option<(u16, u16)> {
        let map = self.sandboxes.lock().unwrap();
        map.get(id).map(|a| (a.ports.proxy, a.ports.dns))
    }

    pub fn is_attached(&self, id: &SandboxId) -> bool {
        self.sandboxes.lock().unwrap().contains_key(id)
    }
}

/// Identity of a namespace file (device and inode of the nsfs file).
fn ns_key(f: &File) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    f.metadata().ok().map(|m| (m.dev(), m.ino()))
}

impl Egress for EgressService {
    fn attach(&self, id: &SandboxId, ns: &File, p: &NetworkPolicy) -> Result<()> {
        let policy = Policy::new(p, self.operator.clone())?;
        // The same namespace again (a sandbox thawed after a pause that kept
        // its memory): swap the policy, keep open connections.
        let same = {
            let map = self.sandboxes.lock().unwrap();
            let key = ns_key(ns);
            key.is_some() && map.get(id).is_some_and(|a| ns_key(&a.netns) == key)
        };
        if same {
            return self.update(id, p);
        }
        self.detach(id);
        let loopback = policy.loopback_ports();
        let fail = |e: std::io::Error| Error::backend(format!("sandbox network: {e}"));
        let (tcp, udp, ports) = netns::run_in(ns, move || {
            firewall::links()?;
            let tcp = std::net::TcpListener::bind("127.0.0.1:0")?;
            let udp = std::net::UdpSocket::bind("127.0.0.1:0")?;
            tcp.set_nonblocking(true)?;
            udp.set_nonblocking(true)?;
            let ports = Ports {
                proxy: tcp.local_addr()?.port(),
                dns: udp.local_addr()?.port(),
                loopback,
            };
            firewall::load(&ports)?;
            Ok((tcp, udp, ports))
        })
        .map_err(fail)?;
        let net = Arc::new(SandboxNet::new(
            policy,
            self.upstream.clone(),
            &self.limits,
            self.totals.clone(),
        ));
        let cancel = CancellationToken::new();
        {
            let _g = self.rt.enter();
            let tcp = tokio::net::TcpListener::from_std(tcp).map_err(fail)?;
            let udp = tokio::net::UdpSocket::from_std(udp).map_err(fail)?;
            self.rt
                .spawn(proxy::serve(tcp, net.clone(), cancel.clone()));
            self.rt.spawn(dns::serve(udp, net.clone(), cancel.clone()));
        }
        let netns = ns.try_clone().map_err(fail)?;
        self.sandboxes.lock().unwrap().insert(
            id.clone(),
            Attached {
                net,
                netns,
                ports,
                cancel,
            },
        );
        Ok(())
    }

    fn detach(&self, id: &SandboxId) {
        if let Some(a) = self.sandboxes.lock().unwrap().remove(id) {
            a.cancel.cancel();
        }
    }
}
