//! `ADD` and `COPY` through a real build (`FROM scratch`, no RUN step): a
//! local archive in every supported compression is unpacked, anything else
//! copied; malicious archives are refused naming the line, the archive and
//! the entry, with nothing left behind; URLs are refused saying why.

use std::collections::HashMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use stasis_core::{ErrorCode, Result};
use tar::EntryType;

use crate::build::{build, BuildRequest, BuildResult, RunOutcome, RunStep, StepRunner};
use crate::layer::tests::{dir, file, symlink, tar_bytes, E};
use crate::layer::ApplyOptions;
use crate::store::{ImageStore, Owner};

struct NoRun;
impl StepRunner for NoRun {
    fn run(&self, _: &RunStep<'_>) -> Result<RunOutcome> {
        panic!("these Dockerfiles have no RUN step")
    }
}

struct Env {
    _tmp: tempfile::TempDir,
    store: ImageStore,
    ctx: PathBuf,
}

fn env() -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let store = ImageStore::open(&tmp.path().join("store")).unwrap();
    let ctx = tmp.path().join("ctx");
    fs::create_dir_all(&ctx).unwrap();
    Env {
        _tmp: tmp,
        store,
        ctx,
    }
}

fn build_with(e: &Env, df: &str, opts: ApplyOptions) -> Result<BuildResult> {
    build(
        &e.store,
        &BuildRequest {
            owner: Owner::Tenant("t1".into()),
            reference: "add:1",
            dockerfile: df,
            context: &e.ctx,
            build_args: HashMap::from([("SRC".to_string(), "https://example.com/a.tgz".into())]),
            opts,
        },
        &NoRun,
        &mut |_| {},
    )
}

fn do_build(e: &Env, df: &str) -> Result<BuildResult> {
    build_with(e, df, ApplyOptions::default())
}

fn owned(name: &str, data: &'static [u8], uid: u64) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o640);
    h.set_uid(uid);
    h.set_gid(uid);
    h.set_cksum();
    b.append_data(&mut h, name, data).unwrap();
    b.into_inner().unwrap()
}

fn compressed(t: &[u8]) -> [(&'static str, Vec<u8>); 5] {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(t).unwrap();
    let mut bz = bzip2::write::BzEncoder::new(Vec::new(), bzip2::Compression::fast());
    bz.write_all(t).unwrap();
    let mut xz = liblzma::write::XzEncoder::new(Vec::new(), 1);
    xz.write_all(t).unwrap();
    [
        ("plain.tar", t.to_vec()),
        ("app.tar.gz", gz.finish().unwrap()),
        ("app.tbz2", bz.finish().unwrap()),
        ("app.tar.xz", xz.finish().unwrap()),
        ("app.tar.zst", zstd::encode_all(t, 3).unwrap()),
    ]
}

#[test]
fn add_unpacks_local_archives_in_every_compression_and_copies_anything_else() {
    let e = env();
    let t = tar_bytes(&[
        dir("pkg"),
        file("pkg/lib.py", b"x = 1\n"),
        symlink("pkg/alias.py", "lib.py"),
    ]);
    let mut df = String::from("FROM scratch\n");
    for (i, (name, bytes)) in compressed(&t).into_iter().enumerate() {
        fs::write(e.ctx.join(name), bytes).unwrap();
        // No trailing slash: an archive still unpacks into a directory.
        df.push_str(&format!("ADD {name} /opt/{i}\n"));
    }
    // Not archives: a gzip of plain text, a text file, a truncated tar.
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(b"just text\n").unwrap();
    fs::write(e.ctx.join("notes.txt.gz"), gz.finish().unwrap()).unwrap();
    fs::write(e.ctx.join("notes.txt"), b"plain\n").unwrap();
    fs::write(e.ctx.join("short.tar"), &t[..100]).unwrap();
    df.push_str("ADD notes.txt.gz notes.txt short.tar /files/\n");
    // COPY never unpacks.
    df.push_str("COPY plain.tar /copied/\n");
    let r = do_build(&e, &df).unwrap();
    let root = &r.image.rootfs;
    for i in 0..5 {
        let d = root.join(format!("opt/{i}/pkg"));
        assert_eq!(fs::read(d.join("lib.py")).unwrap(), b"x = 1\n", "{i}");
        assert_eq!(
            fs::read_link(d.join("alias.py")).unwrap(),
            Path::new("lib.py")
        );
    }
    assert_eq!(
        fs::read(root.join("files/notes.txt.gz")).unwrap(),
        fs::read(e.ctx.join("notes.txt.gz")).unwrap()
    );
    assert_eq!(fs::read(root.join("files/notes.txt")).unwrap(), b"plain\n");
    assert_eq!(fs::read(root.join("files/short.tar")).unwrap(), &t[..100]);
    assert_eq!(fs::read(root.join("copied/plain.tar")).unwrap(), t);
    // Rebuilt unchanged: all hits; ADD and COPY of one file are two keys.
    let again = do_build(&e, &df).unwrap();
    assert_eq!(again.cache_hits, 7);
    let swapped = df.replace("COPY plain.tar /copied/", "ADD plain.tar /copied/");
    let r = do_build(&e, &swapped).unwrap();
    assert_eq!(r.cache_hits, 6);
    assert!(r.image.rootfs.join("copied/pkg/lib.py").is_file());
}

#[test]
fn an_added_archive_keeps_its_owners_unless_chown_names_one() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("ownership NOT CHECKED: not root");
        return;
    }
    let e = env();
    fs::write(e.ctx.join("a.tar"), owned("data", b"d", 1234)).unwrap();
    let r = do_build(
        &e,
        "FROM scratch\nADD a.tar /x/\nADD --chown=7:8 a.tar /y/\n",
    )
    .unwrap();
    let m = fs::metadata(r.image.rootfs.join("x/data")).unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o777), (1234, 1234, 0o640));
    let m = fs::metadata(r.image.rootfs.join("y/data")).unwrap();
    assert_eq!((m.uid(), m.gid()), (7, 8));
}

fn hardlink<'a>(name: &'a str, link: &'a str) -> E<'a> {
    E {
        name,
        kind: EntryType::Link,
        data: b"",
        link,
        mode: 0o644,
    }
}

#[test]
fn a_malicious_added_archive_is_refused_naming_line_archive_and_entry() {
    let e = env();
    fs::write(e.ctx.join("ok.txt"), b"fine").unwrap();
    let dev = E {
        name: "dev/sda",
        kind: EntryType::Block,
        data: b"",
        link: "",
        mode: 0o600,
    };
    let suid = E {
        name: "bin/su",
        kind: EntryType::Regular,
        data: b"#!",
        link: "",
        mode: 0o4755,
    };
    let cases: Vec<(Vec<u8>, &str, &str)> = vec![
        (
            tar_bytes(&[file("../../escape", b"x")]),
            "../../escape",
            "'..'",
        ),
        (tar_bytes(&[file("/etc/abs", b"x")]), "/etc/abs", "absolute"),
        (
            tar_bytes(&[symlink("out", "../../../etc")]),
            "\"out\"",
            "outside the root",
        ),
        (
            tar_bytes(&[symlink("out", "/etc"), file("out/passwd", b"x")]),
            "out/passwd",
            "through the symlink",
        ),
        (
            tar_bytes(&[hardlink("h", "../../etc/shadow")]),
            "\"h\"",
            "leaves the root",
        ),
        (tar_bytes(&[dev]), "dev/sda", "device node"),
        (tar_bytes(&[suid]), "bin/su", "setuid"),
        (
            tar_bytes(&[file("lib/.wh.libc.so", b"")]),
            ".wh.libc.so",
            ".wh.",
        ),
    ];
    for (i, (bytes, entry, why)) in cases.into_iter().enumerate() {
        // Compressed, as a tenant would send it.
        let name = format!("evil{i}.tar.gz");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&bytes).unwrap();
        fs::write(e.ctx.join(&name), gz.finish().unwrap()).unwrap();
        let df = format!("FROM scratch\nCOPY ok.txt /\nADD {name} /opt/\n");
        let err = do_build(&e, &df).unwrap_err();
        let m = &err.message;
        assert!(m.starts_with("Dockerfile line 3: ADD: "), "{m}");
        assert!(
            m.contains(&name) && m.contains(entry) && m.contains(why),
            "{m}"
        );
        assert_eq!(err.code, ErrorCode::InvalidArgument, "{m}");
    }
    // A bomb: 8 MiB of zeros in a few KiB, past a 4 MiB layer limit: 413.
    let zeros = vec![0u8; 8 << 20];
    let bomb = zstd::encode_all(&tar_bytes(&[file("zeros", &zeros)])[..], 19).unwrap();
    assert!(bomb.len() < 64 << 10);
    fs::write(e.ctx.join("bomb.tar.zst"), bomb).unwrap();
    let small = ApplyOptions {
        max_bytes: 4 << 20,
        ..ApplyOptions::default()
    };
    let df = "FROM scratch\nCOPY ok.txt /\nADD bomb.tar.zst /opt/\n";
    let err = build_with(&e, df, small).unwrap_err();
    assert_eq!(err.code, ErrorCode::PayloadTooLarge, "{}", err.message);
    assert!(err.message.contains("bomb.tar.zst"), "{}", err.message);
    // Nothing left behind: no image, no staging; the COPY before stays cached.
    assert!(e
        .store
        .list(&Owner::Tenant("t1".into()))
        .unwrap()
        .is_empty());
    assert_eq!(fs::read_dir(e.store.root().join("tmp")).unwrap().count(), 0);
    assert_eq!(
        fs::read_dir(e.store.root().join("images")).unwrap().count(),
        0
    );
    let r = do_build(&e, "FROM scratch\nCOPY ok.txt /\n").unwrap();
    assert_eq!(r.cache_hits, 1);
}

#[test]
fn a_url_is_refused_saying_the_build_has_no_network() {
    let e = env();
    for df in [
        "FROM scratch\nADD https://example.com/a.tgz /opt/\n",
        // Only a URL once expanded.
        "FROM scratch\nARG SRC\nADD $SRC /opt/\n",
        "FROM scratch\nCOPY http://example.com/x /x\n",
    ] {
        let err = do_build(&e, df).unwrap_err();
        let m = &err.message;
        assert!(m.contains("line "), "{m}");
        assert!(m.contains("no network"), "{m}");
        assert!(m.contains("RUN step"), "{m}");
    }
}

#[test]
fn destinations_follow_the_images_symlinks_and_directories() {
    let e = env();
    // A merged-/usr root: /bin -> usr/bin; /tmp is a directory.
    let l = e.store.temp_dir("t").unwrap().join("l.tar");
    fs::write(
        &l,
        tar_bytes(&[
            dir("usr"),
            dir("usr/bin"),
            symlink("bin", "usr/bin"),
            dir("tmp"),
        ]),
    )
    .unwrap();
    let l = e.store.put_layer(&l).unwrap();
    e.store
        .commit(
            &Owner::Public,
            "merged",
            "1",
            None,
            vec![l],
            crate::store::ImageConfig::default(),
            vec![],
            &ApplyOptions::default(),
        )
        .unwrap();
    fs::write(e.ctx.join("tool"), b"#!/bin/sh\n").unwrap();
    fs::write(e.ctx.join("a.txt"), b"a").unwrap();
    let df = "FROM merged:1\nCOPY tool /bin/\nCOPY a.txt /bin/renamed\nCOPY a.txt /tmp\n\
              WORKDIR /app\nCOPY a.txt .\n";
    let r = do_build(&e, df).unwrap();
    let root = &r.image.rootfs;
    assert_eq!(
        fs::read_link(root.join("bin")).unwrap(),
        Path::new("usr/bin"),
        "/bin is still the image's symlink"
    );
    assert!(root.join("usr/bin/tool").is_file());
    assert_eq!(fs::read(root.join("usr/bin/renamed")).unwrap(), b"a");
    assert_eq!(fs::read(root.join("tmp/a.txt")).unwrap(), b"a");
    assert_eq!(fs::read(root.join("app/a.txt")).unwrap(), b"a");
}
