use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn host() -> Option<Vec<IpAddr>> {
    Some(vec![ip("127.0.0.1"), ip("::1"), ip("203.0.113.9")])
}

fn unreadable() -> Option<Vec<IpAddr>> {
    None
}

fn guard(private: bool, expose: &[&str], listen: &[&str]) -> Guard {
    Guard::new(
        private,
        expose.iter().map(|e| Entry::parse(e).unwrap()).collect(),
        listen.iter().map(|l| l.parse().unwrap()).collect(),
    )
    .with_local(host)
}

#[test]
fn every_refused_range_and_its_edges() {
    use Range::*;
    for (a, r) in [
        ("0.0.0.0", Unspecified),
        ("0.255.255.255", Unspecified),
        ("127.0.0.1", Loopback),
        ("127.0.0.0", Loopback),
        ("127.255.255.255", Loopback),
        ("169.254.169.254", LinkLocal),
        ("169.254.0.0", LinkLocal),
        ("169.254.255.255", LinkLocal),
        ("224.0.0.1", Multicast),
        ("239.255.255.255", Multicast),
        ("255.255.255.255", Broadcast),
        ("240.0.0.1", Reserved),
        ("10.0.0.0", Private),
        ("10.255.255.255", Private),
        ("172.16.0.1", Private),
        ("172.31.255.255", Private),
        ("192.168.0.1", Private),
        ("192.168.255.255", Private),
        ("100.64.0.0", Private),
        ("100.127.255.255", Private),
        ("::", Unspecified),
        ("::1", Loopback),
        ("fe80::1", LinkLocal),
        ("febf:ffff::1", LinkLocal),
        ("ff02::1", Multicast),
        ("fc00::1", Private),
        ("fd00:ec2::254", Private),
        ("fec0::1", Private),
        // IPv6 forms of IPv4 addresses are judged as those addresses.
        ("::ffff:127.0.0.1", Loopback),
        ("::ffff:169.254.169.254", LinkLocal),
        ("::ffff:10.1.2.3", Private),
        ("::ffff:0.0.0.0", Unspecified),
        ("::ffff:224.0.0.1", Multicast),
        ("::127.0.0.1", Loopback),
        ("64:ff9b::7f00:1", Loopback),
        ("64:ff9b::a00:1", Private),
    ] {
        assert_eq!(range_of(ip(a)), Some(r), "{a}");
    }
    for a in [
        "1.1.1.1",
        "9.255.255.255",
        "11.0.0.0",
        "126.255.255.255",
        "128.0.0.0",
        "169.253.255.255",
        "169.255.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "192.167.255.255",
        "192.169.0.0",
        "100.63.255.255",
        "100.128.0.0",
        "223.255.255.255",
        "2001:db8::1",
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
    ] {
        assert_eq!(range_of(ip(a)), None, "{a}");
    }
}

#[test]
fn refusals_at_connect_time() {
    let g = guard(false, &[], &["127.0.0.1:7070"]);
    assert_eq!(
        g.refusal(ip("127.0.0.1"), Some(7070)),
        Some(Why::Daemon),
        "the daemon"
    );
    assert_eq!(
        g.refusal(ip("::ffff:127.0.0.1"), Some(7070)),
        Some(Why::Daemon)
    );
    assert_eq!(
        g.refusal(ip("127.0.0.1"), Some(80)),
        Some(Why::Range(Range::Loopback))
    );
    assert_eq!(
        g.refusal(ip("10.1.2.3"), Some(22)),
        Some(Why::Range(Range::Private))
    );
    assert_eq!(g.refusal(ip("203.0.113.9"), Some(443)), Some(Why::Host));
    assert_eq!(g.refusal(ip("93.184.216.34"), Some(443)), None);
    // Private ranges open with the operator's flag; loopback does not.
    let p = guard(true, &[], &[]);
    assert_eq!(p.refusal(ip("10.1.2.3"), Some(22)), None);
    assert_eq!(p.refusal(ip("::ffff:192.168.1.1"), Some(22)), None);
    assert_eq!(
        p.refusal(ip("127.0.0.1"), Some(80)),
        Some(Why::Range(Range::Loopback))
    );
    assert_eq!(
        p.refusal(ip("169.254.169.254"), Some(80)),
        Some(Why::Range(Range::LinkLocal))
    );
    // The host's own addresses stay closed even when private ranges open.
    let h = Guard::new(true, vec![], vec![]).with_local(|| Some(vec![ip("10.9.9.9")]));
    assert_eq!(h.refusal(ip("10.9.9.9"), Some(22)), Some(Why::Host));
    // Unreadable host addresses: refuse.
    let u = Guard::new(false, vec![], vec![]).with_local(unreadable);
    assert_eq!(u.refusal(ip("93.184.216.34"), Some(443)), Some(Why::Host));
}

#[test]
fn an_unspecified_listen_address_covers_every_host_address() {
    let g = guard(false, &["203.0.113.9", "127.0.0.1"], &["0.0.0.0:7070"]);
    for a in ["127.0.0.1", "127.0.0.5", "203.0.113.9", "::1"] {
        assert_eq!(g.refusal(ip(a), Some(7070)), Some(Why::Daemon), "{a}");
    }
    // Port-less: the exposed addresses' other ports stand; the daemon's
    // port is refused when dialled (above).
    assert_eq!(g.refusal(ip("127.0.0.1"), None), None);
    assert_eq!(g.refusal(ip("203.0.113.9"), None), None);
    assert_eq!(
        g.refusal(ip("127.0.0.5"), None),
        Some(Why::Range(Range::Loopback))
    );
    // Exposed, other ports.
    assert_eq!(g.refusal(ip("203.0.113.9"), Some(80)), None);
    assert_eq!(g.refusal(ip("127.0.0.1"), Some(80)), None);
    // Somebody else's 7070.
    assert_eq!(g.refusal(ip("93.184.216.34"), Some(7070)), None);
}

#[test]
fn exposures_open_exactly_what_they_name() {
    let g = guard(
        false,
        &["127.0.0.1:3141", "10.5.0.0/16"],
        &["127.0.0.1:7070"],
    );
    assert_eq!(g.refusal(ip("127.0.0.1"), Some(3141)), None);
    assert_eq!(g.refusal(ip("::ffff:127.0.0.1"), Some(3141)), None);
    assert!(g.refusal(ip("127.0.0.1"), Some(3142)).is_some());
    assert!(g.refusal(ip("127.0.0.1"), None).is_some());
    assert_eq!(g.refusal(ip("10.5.1.1"), Some(1)), None);
    assert!(g.refusal(ip("10.6.1.1"), Some(1)).is_some());
    // Not even an exposure opens the daemon.
    let d = guard(false, &["127.0.0.0/8"], &["127.0.0.1:7070"]);
    assert_eq!(d.refusal(ip("127.0.0.1"), Some(7070)), Some(Why::Daemon));
    assert_eq!(d.refusal(ip("127.0.0.2"), Some(7070)), None);
}

#[test]
fn tenant_entries() {
    let g = guard(false, &["127.0.0.1:3141"], &["127.0.0.1:7070"]);
    let check = |s: &str| g.check_entry(&Entry::parse(s).unwrap());
    for bad in [
        "127.0.0.1:7070",
        "127.0.0.1",
        "127.0.0.1:80",
        "127.1.0.0/16:80",
        "10.0.0.0/8",
        "10.1.2.3:22",
        "172.16.0.0/12",
        "192.168.1.0/24",
        "100.64.0.0/10",
        "169.254.169.254",
        "169.254.0.0/16",
        "0.0.0.0/8",
        "240.0.0.0/4",
        "[::1]:80",
        "[::ffff:127.0.0.1]:80",
        "fc00::/7",
        "fd12:3456::/32",
        "fe80::/10",
        "203.0.113.9:22",
    ] {
        let e = check(bad)
            .err()
            .unwrap_or_else(|| panic!("{bad} was accepted"));
        assert!(e.contains("never reaches"), "{bad}: {e}");
    }
    for good in [
        // Holds the operator's 127.0.0.1:3141, so not wholly refused (as
        // 127.0.0.0/8 itself); everything else in it stays refused at
        // connect time.
        "::ffff:127.0.0.0/104",
        "0.0.0.0/0",
        "0.0.0.0/1",
        "8.0.0.0/5",
        "::/0",
        "93.184.216.34:443",
        "127.0.0.1:3141",
        // Reaches into what the operator exposes (and only that).
        "127.0.0.0/8",
        "pypi.org",
        "*.pythonhosted.org",
    ] {
        assert_eq!(check(good), Ok(()), "{good}");
    }
    let closed = guard(false, &[], &[]);
    assert!(closed
        .check_entry(&Entry::parse("127.0.0.0/8").unwrap())
        .is_err());
    let p = guard(true, &[], &[]);
    assert_eq!(p.check_entry(&Entry::parse("10.0.0.0/8").unwrap()), Ok(()));
    assert!(p
        .check_entry(&Entry::parse("127.0.0.0/8").unwrap())
        .is_err());
}
