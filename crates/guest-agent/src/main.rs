//! `stasis-agent`: the guest agent binary (static). Started by the guest's PID 1
//! (scripts/guest/pid1), which restarts it if it exits.
//!
//! Usage: stasis-agent [--port DEVICE] [--name PORT_NAME]
//! Without --port, the device is found by name under /sys/class/virtio-ports.

use stasis_guest_agent::{port, Agent, AGENT_VERSION};
use std::sync::Arc;
use std::time::Duration;

fn main() {
    // Before any thread exists, so that all of them inherit the mask.
    port::block_sigio();
    let mut args = std::env::args().skip(1);
    let mut fixed_port: Option<String> = None;
    let mut name = stasis_agent_proto::PORT_NAME.to_string();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--port" => fixed_port = args.next(),
            "--name" => name = args.next().unwrap_or(name),
            "--version" => {
                println!("stasis-agent {AGENT_VERSION}");
                return;
            }
            _ => {
                eprintln!("usage: stasis-agent [--port DEVICE] [--name PORT_NAME]");
                std::process::exit(2);
            }
        }
    }
    // The agent is how the host reaches the guest: never the OOM killer's pick
    // (children get 0 back before exec).
    let _ = std::fs::write("/proc/self/oom_score_adj", "-1000");
    let agent = Arc::new(Agent::new());
    let mut waiting_logged = false;
    loop {
        let path = fixed_port
            .clone()
            .map(Into::into)
            .or_else(|| port::find_port(&name));
        let opened = path.as_ref().map(|p| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(p)
                .map(|f| (p.clone(), f))
        });
        match opened {
            Some(Ok((p, f))) => {
                waiting_logged = false;
                eprintln!(
                    "stasis-agent {AGENT_VERSION}: serving {name} on {} (boot {})",
                    p.display(),
                    stasis_guest_agent::system::boot_id()
                );
                if let Err(e) = port::serve(agent.clone(), f, port::OnEof::WaitForHost) {
                    eprintln!("stasis-agent: port {} failed: {e}; reopening", p.display());
                }
            }
            other => {
                if !waiting_logged {
                    match other {
                        Some(Err(e)) => {
                            eprintln!("stasis-agent: cannot open port {name}: {e}; retrying")
                        }
                        _ => eprintln!("stasis-agent: virtio port {name} not present yet; waiting"),
                    }
                    waiting_logged = true;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
