//! Mount points as the daemon meets them: a root opened in another mount
//! namespace (the sandbox's), acted on from this one (the host's), where
//! the sandbox's mounts are not mount points and the kernel would detach
//! them on an rmdir or rename. Needs root (CAP_SYS_ADMIN), like the daemon.

use super::*;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

/// A thread in a private mount namespace holding tmpfs mounts at
/// `/workspace/m` and `/workspace/held/in` of a scratch root. It hands out
/// the root opened there and, while alive, answers which mounts under the
/// root it still has.
struct Sandboxish {
    root: Root,
    held: MountHolders,
    ask: mpsc::Sender<()>,
    answer: mpsc::Receiver<Vec<String>>,
    _dir: tempfile::TempDir,
}

fn mounts_under(base: &Path) -> Vec<String> {
    let text = std::fs::read_to_string("/proc/thread-self/mountinfo").unwrap();
    let base = base.to_str().unwrap();
    stasis_core::mounts::mount_points(&text)
        .into_iter()
        .filter_map(|p| p.strip_prefix(base).map(str::to_string))
        .filter(|p| !p.is_empty())
        .collect()
}

fn sandboxish() -> Sandboxish {
    let dir = tempfile::tempdir().unwrap();
    for d in ["workspace/m", "workspace/held/in", "workspace/empty"] {
        std::fs::create_dir_all(dir.path().join(d)).unwrap();
    }
    std::fs::write(dir.path().join("workspace/file"), b"f").unwrap();
    let base: PathBuf = dir.path().canonicalize().unwrap();
    let (ask, asked) = mpsc::channel::<()>();
    let (tell, answer) = mpsc::channel::<Vec<String>>();
    let (give, got) = mpsc::channel();
    std::thread::spawn(move || {
        use nix::mount::{mount, MsFlags};
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).expect("unshare (needs root)");
        let none: Option<&str> = None;
        mount(none, "/", none, MsFlags::MS_REC | MsFlags::MS_PRIVATE, none).unwrap();
        for m in ["workspace/m", "workspace/held/in"] {
            let t = base.join(m);
            mount(Some("tmpfs"), &t, Some("tmpfs"), MsFlags::empty(), none).unwrap();
            std::fs::write(t.join("keep"), b"k").unwrap();
        }
        let text = mounts_under(&base).join("\n");
        give.send((Root::open_dir(&base).unwrap(), text)).unwrap();
        while asked.recv().is_ok() {
            tell.send(mounts_under(&base)).unwrap();
        }
    });
    let (root, points) = got.recv().unwrap();
    let lines: String = points
        .lines()
        .map(|p| format!("1 1 0:1 / {p} rw - tmpfs tmpfs rw\n"))
        .collect();
    Sandboxish {
        root,
        held: MountHolders::from_mountinfo(&lines),
        ask,
        answer,
        _dir: dir,
    }
}

impl Sandboxish {
    fn assert_intact(&self) {
        self.ask.send(()).unwrap();
        let mut m = self.answer.recv().unwrap();
        m.sort();
        assert_eq!(
            m,
            ["/workspace/held/in", "/workspace/m"],
            "a mount was detached"
        );
    }
}

fn code(r: Result<()>) -> ErrorCode {
    r.unwrap_err().code
}

#[test]
fn remove_of_or_above_a_mount_point_is_refused() {
    let s = sandboxish();
    s.assert_intact();
    let r = &s.root;
    assert_eq!(
        code(r.remove("/workspace/m", false, &s.held)),
        ErrorCode::MountPoint
    );
    assert_eq!(
        code(r.remove("/workspace/m", true, &s.held)),
        ErrorCode::MountPoint
    );
    assert_eq!(
        code(r.remove("/workspace/held", true, &s.held)),
        ErrorCode::MountPoint
    );
    assert_eq!(
        code(r.remove("/workspace/held/in/keep", false, &s.held)),
        ErrorCode::MountPoint
    );
    s.assert_intact();
    // Without the list of mounts (a path the list does not name), the
    // descent stops at the mount before touching it.
    let unknown = MountHolders::default();
    assert_eq!(
        code(r.remove("/workspace/held", true, &unknown)),
        ErrorCode::MountPoint
    );
    s.assert_intact();
    // Ordinary entries still go.
    r.remove("/workspace/empty", false, &s.held).unwrap();
    r.remove("/workspace/file", false, &s.held).unwrap();
}

#[test]
fn rename_of_onto_or_across_a_mount_point_is_refused() {
    let s = sandboxish();
    let r = &s.root;
    let mv = |a: &str, b: &str| code(r.rename(a, b, &s.held));
    assert_eq!(
        mv("/workspace/m", "/workspace/moved"),
        ErrorCode::MountPoint
    );
    assert_eq!(
        mv("/workspace/held", "/workspace/moved"),
        ErrorCode::MountPoint
    );
    assert_eq!(
        mv("/workspace/empty", "/workspace/m"),
        ErrorCode::MountPoint
    );
    assert_eq!(
        mv("/workspace/file", "/workspace/m/file"),
        ErrorCode::MountPoint
    );
    assert_eq!(
        mv("/workspace/m/keep", "/workspace/keep"),
        ErrorCode::MountPoint
    );
    assert_eq!(mv("/workspace", "/w2"), ErrorCode::MountPoint);
    assert_eq!(mv("/", "/w2"), ErrorCode::MountPoint);
    assert_eq!(mv("/workspace/empty", "/"), ErrorCode::MountPoint);
    // mkdir over a mount point changes nothing either.
    assert_eq!(
        code(r.mkdir("/workspace/m", false)),
        ErrorCode::AlreadyExists
    );
    // `mkdir -p` does not reach into another mount (400, as for reads).
    assert_eq!(
        code(r.mkdir("/workspace/m/sub", true)),
        ErrorCode::InvalidArgument
    );
    s.assert_intact();
    assert!(s._dir.path().join("workspace/empty").is_dir());
    assert!(s._dir.path().join("workspace/file").is_file());
}

#[test]
fn a_directory_does_not_replace_a_file() {
    let s = sandboxish();
    let e = s
        .root
        .rename("/workspace/empty", "/workspace/file", &s.held)
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::AlreadyExists, "{}", e.message);
    assert!(e.message.contains("not a directory"), "{}", e.message);
    s.root.mkdir("/workspace/d2", false).unwrap();
    let e = s
        .root
        .rename("/workspace/file", "/workspace/d2", &s.held)
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::AlreadyExists, "{}", e.message);
}

#[test]
fn chown_of_or_below_a_mount_point_is_refused() {
    let s = sandboxish();
    let r = &s.root;
    let uid = |p: &str| {
        use std::os::unix::fs::MetadataExt;
        std::fs::symlink_metadata(s._dir.path().join(p))
            .unwrap()
            .uid()
    };
    let before = uid("workspace/m");
    assert_eq!(
        code(r.chown("/workspace/m", 4242, 4242)),
        ErrorCode::MountPoint
    );
    assert_eq!(
        code(r.chown("/workspace/m/keep", 4242, 4242)),
        ErrorCode::MountPoint
    );
    assert_eq!(code(r.chown("/", 4242, 4242)), ErrorCode::MountPoint);
    assert_eq!(uid("workspace/m"), before);
    // An ordinary entry beside them changes.
    r.chown("/workspace/file", 4242, 4243).unwrap();
    assert_eq!(uid("workspace/file"), 4242);
    s.assert_intact();
}
