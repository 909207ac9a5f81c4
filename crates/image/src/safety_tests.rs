//! Image builds never touch the host: COPY/ADD of tenant-shaped contexts
//! (symlinks, absolute, relative and chained, to directories and files,
//! hardlinks, archives planting links, several sources per step, bases
//! with links and whiteouts) leave a canary host directory exactly as it
//! was: contents, modes and owners.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tar::EntryType;

use crate::build::{build, BuildRequest, RunOutcome, RunStep, StepRunner};
use crate::layer::tests::{dir, file, symlink as tsymlink, tar_bytes, E};
use crate::layer::ApplyOptions;
use crate::store::{ImageConfig, ImageStore, Owner};
use stasis_core::Result;

struct NoRun;
impl StepRunner for NoRun {
    fn run(&self, _: &RunStep<'_>) -> Result<RunOutcome> {
        panic!("these builds have no RUN step")
    }
}

/// Everything about a host tree: per path, kind, mode, owner, contents.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, (u32, u32, u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    fn walk(p: &Path, rel: &Path, out: &mut BTreeMap<PathBuf, (u32, u32, u32, Vec<u8>)>) {
        let m = fs::symlink_metadata(p).unwrap();
        let body = if m.file_type().is_symlink() {
            fs::read_link(p)
                .unwrap()
                .into_os_string()
                .into_encoded_bytes()
        } else if m.is_file() {
            fs::read(p).unwrap()
        } else {
            vec![]
        };
        out.insert(rel.to_path_buf(), (m.mode(), m.uid(), m.gid(), body));
        if m.is_dir() {
            for e in fs::read_dir(p).unwrap() {
                let e = e.unwrap();
                walk(&e.path(), &rel.join(e.file_name()), out);
            }
        }
    }
    walk(root, Path::new(""), &mut out);
    out
}

struct Host {
    _tmp: tempfile::TempDir,
    /// The canary: a directory and a file a context's links point at.
    dir: PathBuf,
    file: PathBuf,
    store: ImageStore,
    ctx: PathBuf,
}

fn host() -> Host {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("host/canary");
    fs::create_dir_all(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
    let file = tmp.path().join("host/victim.txt");
    fs::write(&file, b"host file").unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(dir.join("keep"), b"kept").unwrap();
    let store = ImageStore::open(&tmp.path().join("store")).unwrap();
    let ctx = tmp.path().join("ctx");
    fs::create_dir(&ctx).unwrap();
    Host {
        dir,
        file,
        store,
        ctx,
        _tmp: tmp,
    }
}

impl Host {
    fn host_root(&self) -> PathBuf {
        self.dir.parent().unwrap().to_path_buf()
    }
    fn build(&self, df: &str) -> Result<()> {
        build(
            &self.store,
            &BuildRequest {
                owner: Owner::Tenant("t1".into()),
                reference: "evil:1",
                dockerfile: df,
                context: &self.ctx,
                build_args: Default::default(),
                opts: ApplyOptions::default(),
            },
            &NoRun,
            &mut |_| {},
        )
        .map(|_| ())
    }
}

fn mkfile(p: &Path, data: &[u8]) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, data).unwrap();
}

#[test]
fn a_later_source_does_not_write_through_a_link_to_a_host_directory() {
    let h = host();
    let before = snapshot(&h.host_root());
    fs::create_dir_all(h.ctx.join("a")).unwrap();
    symlink(&h.dir, h.ctx.join("a/x")).unwrap();
    mkfile(&h.ctx.join("b/x/file.txt"), b"planted");
    fs::set_permissions(h.ctx.join("b/x"), fs::Permissions::from_mode(0o755)).unwrap();
    let _ = h.build("FROM scratch\nCOPY a b /d/\n");
    assert!(
        !h.dir.join("file.txt").exists(),
        "written into the host dir"
    );
    assert_eq!(snapshot(&h.host_root()), before);
}

#[test]
fn a_later_source_does_not_overwrite_a_host_file_through_a_link() {
    let h = host();
    let before = snapshot(&h.host_root());
    fs::create_dir_all(h.ctx.join("a")).unwrap();
    symlink(&h.file, h.ctx.join("a/y")).unwrap();
    mkfile(&h.ctx.join("b/y"), b"overwritten");
    // A file over the earlier link replaces the link in the layer.
    h.build("FROM scratch\nCOPY a b /d/\n").unwrap();
    assert_eq!(fs::read(&h.file).unwrap(), b"host file");
    assert_eq!(snapshot(&h.host_root()), before);
}

#[test]
fn an_added_archive_that_plants_a_link_is_not_written_through() {
    let h = host();
    let before = snapshot(&h.host_root());
    let target = h.dir.to_string_lossy().into_owned();
    fs::write(h.ctx.join("t.tar"), tar_bytes(&[tsymlink("x", &target)])).unwrap();
    mkfile(&h.ctx.join("b/x/file.txt"), b"planted");
    let _ = h.build("FROM scratch\nADD t.tar b /d/\n");
    assert!(
        !h.dir.join("file.txt").exists(),
        "written into the host dir"
    );
    assert_eq!(snapshot(&h.host_root()), before);
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[(self.next() % xs.len() as u64) as usize]
    }
    fn chance(&mut self, n: u64) -> bool {
        self.next().is_multiple_of(n)
    }
}

const NAMES: [&str; 5] = ["a", "b", "x", "y", "d"];

/// A random link target: the canary dir or file (absolute), a relative
/// climb, a sibling (chains), or a name below another link.
fn link_target(r: &mut Rng, h: &Host) -> String {
    let abs_dir = h.dir.to_string_lossy().into_owned();
    let abs_file = h.file.to_string_lossy().into_owned();
    let host = h.host_root().to_string_lossy().into_owned();
    match r.next() % 8 {
        0 => abs_dir,
        1 => abs_file,
        2 => host,
        3 => "../../../../../../../../".to_string() + abs_dir.trim_start_matches('/'),
        4 => format!("../{}", r.pick(&NAMES)),
        5 => r.pick(&NAMES).to_string(),
        6 => format!("{}/{}", r.pick(&NAMES), r.pick(&NAMES)),
        _ => "/".to_string(),
    }
}

/// A random tree under `base` (depth `depth`).
fn tree(r: &mut Rng, h: &Host, base: &Path, depth: u32, files: &mut Vec<PathBuf>) {
    for n in NAMES {
        if !r.chance(2) {
            continue;
        }
        let p = base.join(n);
        match r.next() % 6 {
            0 | 1 if depth > 0 => {
                fs::create_dir(&p).unwrap();
                tree(r, h, &p, depth - 1, files);
            }
            2 => symlink(link_target(r, h), &p).unwrap(),
            3 if !files.is_empty() => {
                let _ = fs::hard_link(r.pick(files), &p);
            }
            _ => {
                fs::write(&p, format!("file {}", p.display())).unwrap();
                files.push(p);
            }
        }
    }
}

/// A random archive: links to the host, files under them, hardlinks and
/// (refused in a plain archive) whiteouts.
// The derefs pick a `&str` out of `&[&str]`: without them `pick` infers
// `T = str` from the expected type and does not compile.
#[allow(clippy::explicit_auto_deref)]
fn archive(r: &mut Rng, h: &Host) -> Vec<u8> {
    let targets: Vec<String> = (0..4).map(|_| link_target(r, h)).collect();
    let mut es: Vec<E<'_>> = vec![];
    for i in 0..(2 + r.next() % 5) {
        let n = *r.pick(&NAMES);
        es.push(match i % 5 {
            0 => tsymlink(n, &targets[(r.next() % 4) as usize]),
            1 => file(*r.pick(&["x/f", "y/f", "a/b/f", "x", "y"]), b"through"),
            2 => dir(n),
            3 => E {
                name: *r.pick(&["x", "y", "a/b/f"]),
                kind: EntryType::Link,
                data: b"",
                link: *r.pick(&["x", "y", "a/b/f", "x/f"]),
                mode: 0o644,
            },
            _ => file(*r.pick(&[".wh.x", "a/.wh..wh..opq", "b"]), b""),
        });
    }
    tar_bytes(&es)
}

/// A base image whose root has links to the host and whiteouts.
fn base_image(h: &Host) {
    let d = h.dir.to_string_lossy().into_owned();
    let f = h.file.to_string_lossy().into_owned();
    let l1 = h.store.root().join("l1.tar");
    fs::write(
        &l1,
        tar_bytes(&[
            dir("etc"),
            file("etc/conf", b"1"),
            tsymlink("lnk", &d),
            tsymlink("flink", &f),
            tsymlink("up", "/../../.."),
            tsymlink("d", "lnk"),
        ]),
    )
    .unwrap();
    let l2 = h.store.root().join("l2.tar");
    fs::write(
        &l2,
        tar_bytes(&[file(".wh.etc", b""), dir("x"), file("x/.wh..wh..opq", b"")]),
    )
    .unwrap();
    let layers = vec![
        h.store.put_layer(&l1).unwrap(),
        h.store.put_layer(&l2).unwrap(),
    ];
    h.store
        .commit(
            &Owner::Public,
            "base",
            "1",
            None,
            layers,
            ImageConfig::default(),
            vec![],
            &ApplyOptions::default(),
        )
        .unwrap();
}

#[test]
fn random_contexts_never_change_the_host() {
    let h = host();
    base_image(&h);
    let before = snapshot(&h.host_root());
    let mut r = Rng(0x5eed_1234_abcd_0001);
    let (mut ok, mut refused) = (0, 0);
    for case in 0..300 {
        fs::remove_dir_all(&h.ctx).unwrap();
        fs::create_dir(&h.ctx).unwrap();
        let mut files = vec![];
        tree(&mut r, &h, &h.ctx, 2, &mut files);
        if r.chance(2) {
            fs::write(h.ctx.join("t.tar"), archive(&mut r, &h)).unwrap();
        }
        let from = if r.chance(2) { "scratch" } else { "base:1" };
        let mut df = format!("FROM {from}\n");
        for _ in 0..(1 + r.next() % 3) {
            let op = if r.chance(2) { "ADD" } else { "COPY" };
            let mut srcs: Vec<&str> = (0..(1 + r.next() % 3))
                .map(|_| *r.pick(&["a", "b", "x", "y", "d", "t.tar", "."]))
                .collect();
            srcs.dedup();
            let dest = r.pick(&[
                "/d/", "/d", "/", "/lnk/", "/lnk/x", "/flink", "/up/z/", "/x/",
            ]);
            df += &format!("{op} {} {dest}\n", srcs.join(" "));
        }
        match h.build(&df) {
            Ok(()) => ok += 1,
            Err(_) => refused += 1,
        }
        assert_eq!(
            snapshot(&h.host_root()),
            before,
            "case {case} changed the host:\n{df}"
        );
    }
    // Both outcomes were exercised.
    assert!(ok > 20 && refused > 20, "{ok} built, {refused} refused");
}
