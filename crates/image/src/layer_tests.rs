use super::*;
use std::ffi::CString;
use std::fs;
use std::os::unix::fs::FileTypeExt;

/// One tar entry with a raw name (so malicious names can be written).
pub(crate) struct E<'a> {
    pub name: &'a str,
    pub kind: EntryType,
    pub data: &'a [u8],
    pub link: &'a str,
    pub mode: u32,
}

pub(crate) fn file<'a>(name: &'a str, data: &'a [u8]) -> E<'a> {
    E {
        name,
        kind: EntryType::Regular,
        data,
        link: "",
        mode: 0o644,
    }
}
pub(crate) fn dir(name: &str) -> E<'_> {
    E {
        name,
        kind: EntryType::Directory,
        data: b"",
        link: "",
        mode: 0o755,
    }
}
pub(crate) fn symlink<'a>(name: &'a str, link: &'a str) -> E<'a> {
    E {
        name,
        kind: EntryType::Symlink,
        data: b"",
        link,
        mode: 0o777,
    }
}

pub(crate) fn tar_bytes(entries: &[E<'_>]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for e in entries {
        let mut h = tar::Header::new_gnu();
        {
            let g = h.as_gnu_mut().unwrap();
            g.name[..e.name.len()].copy_from_slice(e.name.as_bytes());
            g.linkname[..e.link.len()].copy_from_slice(e.link.as_bytes());
        }
        h.set_entry_type(e.kind);
        h.set_size(e.data.len() as u64);
        h.set_mode(e.mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(1_700_000_000);
        h.set_cksum();
        b.append(&h, e.data).unwrap();
    }
    b.into_inner().unwrap()
}

fn apply_bytes(bytes: &[u8], root: &Path) -> Result<LayerStats> {
    apply(bytes, root, &ApplyOptions::default())
}

#[test]
fn plain_gzip_and_zstd_layers_apply() {
    let t = tar_bytes(&[
        dir("etc"),
        file("etc/hello", b"hi"),
        symlink("etc/link", "hello"),
    ]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&t).unwrap();
    let gz = gz.finish().unwrap();
    let zs = zstd::encode_all(&t[..], 3).unwrap();
    for bytes in [&t, &gz, &zs] {
        let root = tempfile::tempdir().unwrap();
        let s = apply_bytes(bytes, root.path()).unwrap();
        assert_eq!(s.entries, 3);
        assert_eq!(fs::read(root.path().join("etc/hello")).unwrap(), b"hi");
        assert_eq!(
            fs::read_link(root.path().join("etc/link")).unwrap(),
            Path::new("hello")
        );
    }
}

fn assert_refused(entries: &[E<'_>], needle: &str, culprit: &str) {
    let root = tempfile::tempdir().unwrap();
    let e = apply_bytes(&tar_bytes(entries), root.path()).unwrap_err();
    assert!(e.message.contains(needle), "{}", e.message);
    assert!(e.message.contains(culprit), "{}", e.message);
}

#[test]
fn dotdot_escape_is_refused_with_the_entry_named() {
    assert_refused(
        &[file("a/../../evil", b"x")],
        "escapes the root",
        "a/../../evil",
    );
}

#[test]
fn absolute_names_are_refused() {
    assert_refused(&[file("/etc/evil", b"x")], "absolute path", "/etc/evil");
}

#[test]
fn symlink_climbing_out_is_refused_and_absolute_targets_are_kept() {
    assert_refused(
        &[symlink("a/b/esc", "../../../etc/passwd")],
        "resolves outside the root",
        "a/b/esc",
    );
    let root = tempfile::tempdir().unwrap();
    apply_bytes(
        &tar_bytes(&[
            symlink("a/b/ok", "../../etc/x"),
            symlink("abs", "/etc/passwd"),
        ]),
        root.path(),
    )
    .unwrap();
}

#[test]
fn writing_through_a_symlink_is_refused() {
    // A symlink to the host's /tmp, then a file "inside" it.
    assert_refused(
        &[symlink("out", "/tmp"), file("out/planted", b"x")],
        "through the symlink",
        "out/planted",
    );
}

#[test]
fn hardlinks_outside_the_root_or_through_symlinks_are_refused() {
    let hl = |name: &'static str, link: &'static str| E {
        name,
        kind: EntryType::Link,
        data: b"",
        link,
        mode: 0o644,
    };
    assert_refused(&[hl("h", "../../etc/shadow")], "leaves the root", "\"h\"");
    assert_refused(&[hl("h", "/etc/shadow")], "leaves the root", "\"h\"");
    assert_refused(
        &[symlink("etc", "/etc"), hl("h", "etc/hostname")],
        "not a regular file inside the root",
        "\"h\"",
    );
    let root = tempfile::tempdir().unwrap();
    apply_bytes(&tar_bytes(&[file("f", b"data"), hl("g", "f")]), root.path()).unwrap();
    let (a, b) = (
        fs::metadata(root.path().join("f")).unwrap(),
        fs::metadata(root.path().join("g")).unwrap(),
    );
    assert_eq!(a.ino(), b.ino());
}

#[test]
fn device_nodes_are_refused() {
    for kind in [EntryType::Char, EntryType::Block] {
        assert_refused(
            &[E {
                name: "dev/sda",
                kind,
                data: b"",
                link: "",
                mode: 0o600,
            }],
            "device node",
            "dev/sda",
        );
    }
}

#[test]
fn setuid_from_an_untrusted_source_is_refused_but_an_operator_may() {
    let suid = E {
        name: "bin/su",
        kind: EntryType::Regular,
        data: b"#!",
        link: "",
        mode: 0o4755,
    };
    assert_refused(&[suid], "setuid/setgid", "bin/su");
    let sgid_dir = E {
        name: "shared",
        kind: EntryType::Directory,
        data: b"",
        link: "",
        mode: 0o2775,
    };
    assert_refused(&[sgid_dir], "setuid/setgid", "shared");
    let root = tempfile::tempdir().unwrap();
    let suid = E {
        name: "bin/su",
        kind: EntryType::Regular,
        data: b"#!",
        link: "",
        mode: 0o4755,
    };
    let opts = ApplyOptions {
        allow_setid: true,
        ..Default::default()
    };
    apply(&tar_bytes(&[suid])[..], root.path(), &opts).unwrap();
    let m = fs::metadata(root.path().join("bin/su")).unwrap();
    assert_eq!(m.mode() & 0o7777, 0o4755);
}

#[test]
fn a_layer_past_the_decompression_limit_is_refused() {
    let big = vec![0u8; 4 << 20];
    let zs = zstd::encode_all(&tar_bytes(&[file("zeros", &big)])[..], 3).unwrap();
    assert!(zs.len() < 64 << 10, "compresses well: {}", zs.len());
    let root = tempfile::tempdir().unwrap();
    let opts = ApplyOptions {
        max_bytes: 1 << 20,
        ..Default::default()
    };
    let e = apply(&zs[..], root.path(), &opts).unwrap_err();
    assert_eq!(e.code, ErrorCode::PayloadTooLarge, "{}", e.message);
    // Within the limit it applies.
    let opts = ApplyOptions {
        max_bytes: 8 << 20,
        ..Default::default()
    };
    apply(&zs[..], root.path(), &opts).unwrap();
}

#[test]
fn whiteouts_remove_lower_files_and_opaque_dirs_empty_them() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    apply_bytes(
        &tar_bytes(&[
            file("a/keep", b"1"),
            file("a/gone", b"2"),
            file("b/old1", b"3"),
            file("b/sub/old2", b"4"),
        ]),
        r,
    )
    .unwrap();
    apply_bytes(
        &tar_bytes(&[
            file("a/.wh.gone", b""),
            dir("b"),
            file("b/new", b"5"),
            file("b/.wh..wh..opq", b""),
        ]),
        r,
    )
    .unwrap();
    assert!(r.join("a/keep").exists());
    assert!(!r.join("a/gone").exists());
    assert!(!r.join("a/.wh.gone").exists());
    assert!(!r.join("b/old1").exists());
    assert!(!r.join("b/sub").exists());
    assert_eq!(fs::read(r.join("b/new")).unwrap(), b"5");
    assert!(!r.join("b/.wh..wh..opq").exists());
}

#[test]
fn atomic_apply_leaves_nothing_behind_on_refusal() {
    let tmp = tempfile::tempdir().unwrap();
    let good = tmp.path().join("good.tar");
    let bad = tmp.path().join("bad.tar");
    fs::write(&good, tar_bytes(&[file("ok", b"1")])).unwrap();
    fs::write(&bad, tar_bytes(&[file("x", b"1"), file("../evil", b"2")])).unwrap();
    let images = tmp.path().join("images");
    let dest = images.join("rootfs");
    let e =
        apply_all_atomic(None, &[good.clone(), bad], &dest, &ApplyOptions::default()).unwrap_err();
    assert!(e.message.contains("../evil"), "{}", e.message);
    assert_eq!(fs::read_dir(&images).unwrap().count(), 0, "staging removed");
    apply_all_atomic(None, &[good], &dest, &ApplyOptions::default()).unwrap();
    assert!(dest.join("ok").is_file());
}

#[test]
fn write_layer_turns_overlay_whiteouts_into_oci_ones_and_round_trips() {
    let tmp = tempfile::tempdir().unwrap();
    let upper = tmp.path().join("upper");
    fs::create_dir_all(upper.join("etc")).unwrap();
    fs::write(upper.join("etc/conf"), b"v=1").unwrap();
    std::os::unix::fs::symlink("conf", upper.join("etc/alias")).unwrap();
    let is_root = unsafe { libc::geteuid() } == 0;
    if is_root {
        let c = CString::new(upper.join("etc/removed").as_os_str().as_bytes()).unwrap();
        // SAFETY: valid path; a 0/0 char device is overlayfs's whiteout.
        assert_eq!(unsafe { libc::mknod(c.as_ptr(), libc::S_IFCHR, 0) }, 0);
        assert!(fs::symlink_metadata(upper.join("etc/removed"))
            .unwrap()
            .file_type()
            .is_char_device());
    }
    let layer = tmp.path().join("layer.tar.zst");
    let (digest, size) = write_layer(&upper, &layer).unwrap();
    assert_eq!(digest, Digest::of_file(&layer).unwrap());
    assert_eq!(size, fs::metadata(&layer).unwrap().len());

    let root = tmp.path().join("root");
    fs::create_dir_all(root.join("etc")).unwrap();
    fs::write(root.join("etc/removed"), b"lower").unwrap();
    apply_file(&layer, &root, &ApplyOptions::default()).unwrap();
    assert_eq!(fs::read(root.join("etc/conf")).unwrap(), b"v=1");
    assert_eq!(
        fs::read_link(root.join("etc/alias")).unwrap(),
        Path::new("conf")
    );
    assert_eq!(root.join("etc/removed").exists(), !is_root);
}

#[test]
fn a_change_named_like_a_whiteout_cannot_become_a_layer() {
    // It would read back as the deletion of `data`, not as a file.
    let tmp = tempfile::tempdir().unwrap();
    let upper = tmp.path().join("upper");
    fs::create_dir_all(upper.join("srv")).unwrap();
    fs::write(upper.join("srv/.wh.data"), b"x").unwrap();
    let e = write_layer(&upper, &tmp.path().join("l.tar.zst")).unwrap_err();
    assert!(e.message.contains("srv/.wh.data"), "{}", e.message);
    // In a plain archive (a context, an ADD) such a name is refused too.
    let root = tempfile::tempdir().unwrap();
    let opts = ApplyOptions::default().plain();
    let e = apply(
        &tar_bytes(&[file("srv/.wh.data", b"")])[..],
        root.path(),
        &opts,
    )
    .unwrap_err();
    assert!(e.message.contains("srv/.wh.data"), "{}", e.message);
}
