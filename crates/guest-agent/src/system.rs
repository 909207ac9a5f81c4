//! Guest-wide requests: identity, clock, entropy, sync.

use crate::AgentError;
use std::io::Write;
use std::sync::OnceLock;

/// Random per guest boot: the kernel's boot_id, which lives in guest memory and
/// so is unchanged by pause/resume (and by an agent restart), new on cold boot.
pub fn boot_id() -> String {
    static ID: OnceLock<String> = OnceLock::new();
    ID.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
            .map(|s| s.trim().to_string())
            .ok()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| crate::random_hex(16))
    })
    .clone()
}

pub fn set_time(unix_nanos: u64) -> Result<(), AgentError> {
    let ts = libc::timespec {
        tv_sec: (unix_nanos / 1_000_000_000) as libc::time_t,
        tv_nsec: (unix_nanos % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: valid timespec pointer.
    if unsafe { libc::clock_settime(libc::CLOCK_REALTIME, &ts) } != 0 {
        return Err(AgentError::internal(format!(
            "clock_settime: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

fn valid_hostname(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 64
        && h.split('.').all(|l| {
            !l.is_empty()
                && !l.starts_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

pub fn set_identity(hostname: &str, machine_id: &str, entropy: &[u8]) -> Result<(), AgentError> {
    if !valid_hostname(hostname) {
        return Err(AgentError::invalid(format!(
            "invalid hostname {hostname:?}"
        )));
    }
    let mid = machine_id.to_ascii_lowercase();
    if mid.len() != 32 || !mid.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(AgentError::invalid(
            "machine_id must be 32 hexadecimal characters",
        ));
    }
    // Entropy first: whatever reads randomness next should see the new state.
    if !entropy.is_empty() {
        add_entropy(entropy)?;
    }
    // SAFETY: pointer and length of a valid byte string.
    if unsafe { libc::sethostname(hostname.as_ptr() as *const _, hostname.len()) } != 0 {
        return Err(AgentError::internal(format!(
            "sethostname: {}",
            std::io::Error::last_os_error()
        )));
    }
    let write = |path: &str, content: &str| -> Result<(), AgentError> {
        let p = std::path::Path::new(path);
        if let Some(parent) = p.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        std::fs::write(p, content).map_err(|e| AgentError::io(p, e))
    };
    write("/etc/hostname", &format!("{hostname}\n"))?;
    write("/etc/machine-id", &format!("{mid}\n"))?;
    // Keep the hostname resolvable (127.0.1.1 line, Debian style).
    if let Ok(hosts) = std::fs::read_to_string("/etc/hosts") {
        let mut found = false;
        let mut out: Vec<String> = hosts
            .lines()
            .map(|l| {
                if l.starts_with("127.0.1.1") {
                    found = true;
                    format!("127.0.1.1\t{hostname}")
                } else {
                    l.to_string()
                }
            })
            .collect();
        if !found {
            out.push(format!("127.0.1.1\t{hostname}"));
        }
        let _ = std::fs::write("/etc/hosts", out.join("\n") + "\n");
    }
    Ok(())
}

// From <linux/random.h>.
const RNDADDENTROPY: libc::c_ulong = 0x4008_5203; // _IOW('R', 0x03, int[2])
const RNDRESEEDCRNG: libc::c_ulong = 0x5207; // _IO('R', 0x07)

/// Mix `data` into the kernel pool: credited with RNDADDENTROPY when allowed
/// (root), else just written; then force a reseed of the CRNG so a forked guest
/// diverges immediately.
fn add_entropy(data: &[u8]) -> Result<(), AgentError> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/urandom")
        .map_err(|e| AgentError::io(std::path::Path::new("/dev/urandom"), e))?;
    for chunk in data.chunks(512) {
        // struct rand_pool_info { int entropy_count; int buf_size; __u32 buf[]; }
        let mut info = Vec::with_capacity(8 + chunk.len());
        info.extend_from_slice(&((chunk.len() * 8) as i32).to_ne_bytes());
        info.extend_from_slice(&(chunk.len() as i32).to_ne_bytes());
        info.extend_from_slice(chunk);
        while info.len() % 4 != 0 {
            info.push(0);
        }
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        // SAFETY: info holds a well-formed rand_pool_info of the declared size.
        let rc = unsafe { libc::ioctl(fd, RNDADDENTROPY as _, info.as_ptr()) };
        if rc != 0 {
            f.write_all(chunk)
                .map_err(|e| AgentError::io(std::path::Path::new("/dev/urandom"), e))?;
        }
    }
    let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
    // SAFETY: argument-less ioctl.
    unsafe { libc::ioctl(fd, RNDRESEEDCRNG as _, 0) };
    Ok(())
}

pub fn sync() {
    // SAFETY: no arguments.
    unsafe { libc::sync() };
}
