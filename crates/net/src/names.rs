//! The synthetic addresses a sandbox's resolver hands out.
//!
//! Each allowed name gets an address in 198.18.0.0/15 (the benchmarking
//! range, never routed on the Internet), chosen by a hash of the name so the
//! same name gets the same address after a pause/resume or on another node
//! (a cached answer keeps working); a collision inside one sandbox takes the
//! next free address. The proxy maps the address the sandbox dialled back to
//! the name: a sandbox can only reach, by name, what its resolver answered.

use std::collections::HashMap;
use std::net::Ipv4Addr;

const BASE: u32 = 0xC612_0000; // 198.18.0.0
const SIZE: u32 = 1 << 17; // /15

/// At most this many names per sandbox.
pub const MAX_NAMES: usize = 16 * 1024;

#[derive(Debug, Default)]
pub struct Names {
    by_name: HashMap<String, Ipv4Addr>,
    by_addr: HashMap<Ipv4Addr, String>,
}

fn hash(name: &str) -> u32 {
    // FNV-1a: stable across builds and nodes.
    let mut h: u32 = 0x811c9dc5;
    for b in name.bytes() {
        h ^= b as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The `i`-th candidate address of `name` (skipping the range's first and
/// last address, network/broadcast-like).
fn nth(name: &str, i: u32) -> Ipv4Addr {
    Ipv4Addr::from(BASE + 1 + (hash(name).wrapping_add(i) % (SIZE - 2)))
}

/// The address `name` gets when nothing else holds it.
fn home(name: &str) -> Ipv4Addr {
    nth(name, 0)
}

/// Whether `ip` lies in the synthetic range.
pub fn is_synthetic(ip: Ipv4Addr) -> bool {
    u32::from(ip) & !(SIZE - 1) == BASE
}

impl Names {
    /// The address for `name`, assigned now if new (`None`: table full).
    pub fn addr_for(&mut self, name: &str) -> Option<Ipv4Addr> {
        if let Some(a) = self.by_name.get(name) {
            return Some(*a);
        }
        if self.by_name.len() >= MAX_NAMES {
            return None;
        }
        let addr = (0..SIZE)
            .map(|i| nth(name, i))
            .find(|a| !self.by_addr.contains_key(a))?;
        self.by_name.insert(name.to_string(), addr);
        self.by_addr.insert(addr, name.to_string());
        Some(addr)
    }

    /// Take back `name` at `ip` after a re-attach (resume, restore, a
    /// daemon restart or another node): the table starts empty then, while
    /// the sandbox may still hold an answer from before. Admitted only when
    /// `ip` is the address the hash gives `name` and neither is taken, so a
    /// sandbox cannot pick which name an address stands for; a name that
    /// had taken a collision's next address must be resolved again.
    pub fn adopt(&mut self, name: &str, ip: Ipv4Addr) -> bool {
        if self.by_name.contains_key(name) || self.by_addr.contains_key(&ip) {
            return self.by_name.get(name) == Some(&ip);
        }
        if self.by_name.len() >= MAX_NAMES || home(name) != ip {
            return false;
        }
        self.by_name.insert(name.to_string(), ip);
        self.by_addr.insert(ip, name.to_string());
        true
    }

    pub fn name_of(&self, ip: Ipv4Addr) -> Option<&str> {
        self.by_addr.get(&ip).map(|s| s.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stable_and_distinct() {
        let mut a = Names::default();
        let mut b = Names::default();
        let x = a.addr_for("allowed.test").unwrap();
        assert!(is_synthetic(x));
        assert_eq!(b.addr_for("allowed.test"), Some(x));
        assert_eq!(a.addr_for("allowed.test"), Some(x));
        assert_eq!(a.name_of(x), Some("allowed.test"));
        assert!(!is_synthetic(Ipv4Addr::new(198, 20, 0, 1)));
        assert!(!is_synthetic(Ipv4Addr::new(127, 0, 0, 1)));
        // Many names, no address shared.
        let mut seen = std::collections::HashSet::new();
        for i in 0..5000 {
            let ip = a.addr_for(&format!("n{i}.allowed.test")).unwrap();
            assert!(seen.insert(ip) && is_synthetic(ip));
        }
    }

    #[test]
    fn a_fresh_table_adopts_only_a_names_own_address() {
        let x = Names::default().addr_for("allowed.test").unwrap();
        let y = Names::default().addr_for("other.test").unwrap();
        let mut n = Names::default();
        // Another name's address, or one outside the hash, is not adopted.
        assert!(!n.adopt("allowed.test", y));
        assert!(!n.adopt("allowed.test", Ipv4Addr::new(198, 18, 0, 77)));
        assert!(n.adopt("allowed.test", x));
        assert_eq!(n.name_of(x), Some("allowed.test"));
        assert_eq!(n.addr_for("allowed.test"), Some(x));
        // Adopting again is fine; the address cannot be claimed for another.
        assert!(n.adopt("allowed.test", x));
        assert!(!n.adopt("other.test", x));
    }

    #[test]
    fn collisions_take_the_next_address() {
        let mut n = Names::default();
        let x = n.addr_for("a.test").unwrap();
        // Force a collision by planting another name on a's address.
        let mut m = Names::default();
        m.by_addr.insert(x, "squatter.test".into());
        let y = m.addr_for("a.test").unwrap();
        assert_ne!(x, y);
        assert_eq!(m.name_of(y), Some("a.test"));
    }
}
