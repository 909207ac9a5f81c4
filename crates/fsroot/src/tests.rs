use super::*;
use std::os::unix::fs::symlink;

fn tree() -> (tempfile::TempDir, tempfile::TempDir) {
    // A tree and, beside it, a "host" directory links point at.
    let t = tempfile::tempdir().unwrap();
    let host = tempfile::tempdir().unwrap();
    std::fs::create_dir(t.path().join("d")).unwrap();
    std::fs::write(host.path().join("secret"), b"host").unwrap();
    symlink(host.path(), t.path().join("abs")).unwrap();
    symlink("../..", t.path().join("d/up")).unwrap();
    (t, host)
}

#[test]
fn no_rule_reaches_outside_the_root() {
    let (t, _host) = tree();
    for r in [Resolve::InRoot, Resolve::Beneath, Resolve::NoSymlinks] {
        let d = Dir::open(t.path(), r).unwrap();
        // Through the absolute link: clamped (not found) or refused.
        assert!(d
            .open_path(Path::new("abs/secret"), libc::O_RDONLY, 0)
            .is_err());
        assert!(d
            .open_path(Path::new("d/up/secret"), libc::O_RDONLY, 0)
            .is_err());
        assert!(d.create_dir_all(Path::new("abs/new"), 0o755).is_err() || r == Resolve::InRoot);
    }
    // In root, `abs` is clamped: the directory it names is made inside.
    let d = Dir::open(t.path(), Resolve::InRoot).unwrap();
    let _ = d.create_dir_all(Path::new("abs/new"), 0o755);
    assert!(!_host.path().join("new").exists());
}

#[test]
fn no_symlinks_refuses_every_link_and_beneath_only_escaping_ones() {
    let (t, _host) = tree();
    symlink("d", t.path().join("rel")).unwrap();
    let ns = Dir::open(t.path(), Resolve::NoSymlinks).unwrap();
    let e = ns.create_dir_all(Path::new("rel/x"), 0o755).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
    let b = Dir::open(t.path(), Resolve::Beneath).unwrap();
    b.create_dir_all(Path::new("rel/x"), 0o755).unwrap();
    assert!(t.path().join("d/x").is_dir());
    let e = b.open_dir(Path::new("abs")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EXDEV));
}

#[test]
fn name_operations_never_follow_a_link() {
    let (t, host) = tree();
    let d = Dir::open(t.path(), Resolve::NoSymlinks).unwrap();
    // open_at of a symlink is ELOOP, not the host file.
    symlink(host.path().join("secret"), t.path().join("f")).unwrap();
    let e = d
        .open_at(OsStr::new("f"), libc::O_WRONLY | libc::O_TRUNC, 0)
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ELOOP));
    // remove_all_at of a link to a host dir removes the link only.
    d.remove_all_at(OsStr::new("abs")).unwrap();
    assert_eq!(std::fs::read(host.path().join("secret")).unwrap(), b"host");
    assert!(!d.exists_at(OsStr::new("abs")).unwrap());
    // chown/mtime of a link touch the link.
    d.set_mtime_at(OsStr::new("f"), 5).unwrap();
    let m = std::fs::metadata(host.path().join("secret")).unwrap();
    assert_ne!(std::os::unix::fs::MetadataExt::mtime(&m), 5);
    // Names with a slash or dots are refused.
    for bad in ["", ".", "..", "a/b"] {
        assert!(d.mkdir_at(OsStr::new(bad), 0o755).is_err(), "{bad:?}");
    }
}

#[test]
fn builds_removes_and_lists_a_tree() {
    let t = tempfile::tempdir().unwrap();
    let d = Dir::open(t.path(), Resolve::NoSymlinks).unwrap();
    let sub = d.create_dir_all(Path::new("a/b/c"), 0o755).unwrap();
    let f = sub
        .open_at(
            OsStr::new("f"),
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL,
            0o600,
        )
        .unwrap();
    fchmod(f.as_fd(), 0o640).unwrap();
    sub.symlink_at(OsStr::new("/etc"), OsStr::new("l")).unwrap();
    sub.link_at(OsStr::new("f"), &sub, OsStr::new("h")).unwrap();
    sub.mkfifo_at(OsStr::new("p"), 0o600).unwrap();
    assert_eq!(sub.entries().unwrap(), ["f", "h", "l", "p"]);
    assert_eq!(sub.read_link_at(OsStr::new("l")).unwrap(), "/etc");
    assert_eq!(
        d.lstat(Path::new("a/b/c/f")).unwrap().st_mode & 0o777,
        0o640
    );
    assert_eq!(d.lstat(Path::new("a/b/c/f")).unwrap().st_nlink, 2);
    let (p, n) = d.split(Path::new("a/b/c/f")).unwrap();
    p.rename_at(&n, &d, OsStr::new("moved")).unwrap();
    assert!(t.path().join("moved").is_file());
    d.remove_all_at(OsStr::new("a")).unwrap();
    assert_eq!(d.entries().unwrap(), ["moved"]);
}
