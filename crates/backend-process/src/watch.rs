//! Change events under a directory of a sandbox (the `inotify` crate).
//!
//! Every watched directory is first opened inside the sandbox's root with
//! `openat2(RESOLVE_IN_ROOT)` (the last component not followed, so a
//! symlinked directory is not descended), and the watch is added on that
//! descriptor's `/proc/self/fd/N`: no path the sandbox controls is ever
//! resolved from the daemon's root, so a directory swapped for a symlink to
//! a host path cannot make the daemon watch the host. New directories are
//! watched as they appear. The watch ends when the receiver is dropped or
//! the watched directory goes away.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::os::fd::AsRawFd;
use std::time::Duration;

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use tokio::sync::mpsc;

use stasis_core::{Error, FileEvent, FileEventKind, Result};

use crate::fsops::{map_err, Root};

/// Most directories one watch follows (each is a kernel inotify watch).
const MAX_DIRS: usize = 4096;
/// Events buffered for a slow reader before the watcher waits on it.
const QUEUE: usize = 1024;

struct Watcher {
    root: Root,
    base: String,
    ino: Inotify,
    dirs: HashMap<WatchDescriptor, String>,
    top: Option<WatchDescriptor>,
}

fn mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::CLOSE_WRITE
        | WatchMask::ATTRIB
        | WatchMask::DELETE
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
        | WatchMask::ONLYDIR
}

fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}

impl Watcher {
    /// Watch the directory `rel` (relative to the base) and those under it.
    fn add_tree(&mut self, rel: &str) -> Result<()> {
        if self.dirs.len() >= MAX_DIRS {
            return Ok(());
        }
        let abs = if rel.is_empty() {
            self.base.clone()
        } else {
            format!("{}/{rel}", self.base.trim_end_matches('/'))
        };
        // The base may be reached through a symlink (resolved in the root).
        let nofollow = if rel.is_empty() { 0 } else { libc::O_NOFOLLOW };
        let fd = match self
            .root
            .openat2(&abs, libc::O_RDONLY | libc::O_DIRECTORY | nofollow, 0)
        {
            Ok(fd) => fd,
            // Gone again, or not a directory (a symlink): nothing to watch.
            Err(_) if !rel.is_empty() => return Ok(()),
            Err(e) => return Err(map_err(e, &abs)),
        };
        let wd = self
            .ino
            .watches()
            .add(format!("/proc/self/fd/{}", fd.as_raw_fd()), mask())
            .map_err(|e| Error::internal(format!("watching {abs}: {e}")))?;
        if rel.is_empty() {
            self.top = Some(wd.clone());
        }
        self.dirs.insert(wd, rel.to_string());
        // Directories made before the watch was in place.
        let dup = unsafe { libc::dup(fd.as_raw_fd()) };
        if dup < 0 {
            return Ok(());
        }
        let Ok(mut d) = nix::dir::Dir::from_fd(dup) else {
            return Ok(());
        };
        let subdirs: Vec<String> = d
            .iter()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_type() == Some(nix::dir::Type::Directory))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n != "." && n != "..")
            .collect();
        for n in subdirs {
            self.add_tree(&join(rel, &n))?;
        }
        Ok(())
    }

    /// Read what is there; false when the watch is over.
    fn pump(&mut self, tx: &mpsc::Sender<FileEvent>, buf: &mut [u8]) -> bool {
        let mut out = Vec::new();
        let mut moved: Vec<(u32, String)> = Vec::new();
        let mut over = false;
        let mut new_dirs = Vec::new();
        match self.ino.read_events(buf) {
            Ok(events) => {
                for ev in events {
                    let Some(dir) = self.dirs.get(&ev.wd).cloned() else {
                        continue;
                    };
                    if ev.mask.contains(EventMask::IGNORED) {
                        self.dirs.remove(&ev.wd);
                        over |= Some(&ev.wd) == self.top.as_ref();
                        continue;
                    }
                    if ev
                        .mask
                        .intersects(EventMask::DELETE_SELF | EventMask::MOVE_SELF)
                    {
                        over |= Some(&ev.wd) == self.top.as_ref();
                        continue;
                    }
                    let Some(name) = ev.name.map(OsStr::to_string_lossy) else {
                        continue;
                    };
                    let path = join(&dir, &name);
                    let is_dir = ev.mask.contains(EventMask::ISDIR);
                    let ev_of = |kind, path: String| FileEvent {
                        kind,
                        path,
                        to: None,
                    };
                    if ev.mask.contains(EventMask::CREATE) {
                        if is_dir {
                            new_dirs.push(path.clone());
                        }
                        out.push(ev_of(FileEventKind::Created, path));
                    } else if ev
                        .mask
                        .intersects(EventMask::CLOSE_WRITE | EventMask::ATTRIB)
                    {
                        if !is_dir {
                            out.push(ev_of(FileEventKind::Modified, path));
                        }
                    } else if ev.mask.contains(EventMask::DELETE) {
                        out.push(ev_of(FileEventKind::Removed, path));
                    } else if ev.mask.contains(EventMask::MOVED_FROM) {
                        moved.push((ev.cookie, path));
                    } else if ev.mask.contains(EventMask::MOVED_TO) {
                        if is_dir {
                            new_dirs.push(path.clone());
                        }
                        match moved.iter().position(|(c, _)| *c == ev.cookie) {
                            Some(i) => {
                                let (_, from) = moved.remove(i);
                                out.push(FileEvent {
                                    kind: FileEventKind::Renamed,
                                    path: from,
                                    to: Some(path),
                                });
                            }
                            None => out.push(ev_of(FileEventKind::Created, path)),
                        }
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return false,
        }
        // Moved out of the watched tree.
        for (_, from) in moved {
            out.push(FileEvent {
                kind: FileEventKind::Removed,
                path: from,
                to: None,
            });
        }
        for d in new_dirs {
            let _ = self.add_tree(&d);
        }
        for ev in out {
            if tx.blocking_send(ev).is_err() {
                return false;
            }
        }
        !over
    }
}

/// Start watching the directory `path` (absolute, normalized) of `root`.
pub(crate) fn start(root: Root, path: &str) -> Result<mpsc::Receiver<FileEvent>> {
    let ino = Inotify::init().map_err(|e| Error::internal(format!("inotify: {e}")))?;
    let mut w = Watcher {
        root,
        base: path.to_string(),
        ino,
        dirs: HashMap::new(),
        top: None,
    };
    w.add_tree("")?;
    let (tx, rx) = mpsc::channel(QUEUE);
    std::thread::Builder::new()
        .name("stasis-watch".into())
        .spawn(move || {
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let mut pfd = libc::pollfd {
                    fd: w.ino.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                let ms = Duration::from_millis(250).as_millis() as i32;
                unsafe { libc::poll(&mut pfd, 1, ms) };
                if tx.is_closed() || !w.pump(&tx, &mut buf) {
                    break;
                }
            }
        })
        .map_err(|e| Error::internal(format!("watch thread: {e}")))?;
    Ok(rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn next(rx: &mut mpsc::Receiver<FileEvent>) -> FileEvent {
        let t0 = std::time::Instant::now();
        loop {
            match rx.try_recv() {
                Ok(e) => return e,
                Err(_) if t0.elapsed() < Duration::from_secs(5) => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Err(e) => panic!("no event: {e}"),
            }
        }
    }

    #[test]
    fn events_are_relative_and_follow_new_dirs() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("w/old")).unwrap();
        let mut rx = start(Root::open_dir(t.path()).unwrap(), "/w").unwrap();
        std::fs::write(t.path().join("w/a"), b"1").unwrap();
        assert_eq!(next(&mut rx).kind, FileEventKind::Created);
        let e = next(&mut rx);
        assert_eq!((e.kind, e.path.as_str()), (FileEventKind::Modified, "a"));
        std::fs::write(t.path().join("w/old/b"), b"1").unwrap();
        let e = next(&mut rx);
        assert_eq!((e.kind, e.path.as_str()), (FileEventKind::Created, "old/b"));
        next(&mut rx);
        std::fs::create_dir(t.path().join("w/new")).unwrap();
        assert_eq!(next(&mut rx).path, "new");
        std::thread::sleep(Duration::from_millis(300));
        std::fs::write(t.path().join("w/new/c"), b"").unwrap();
        assert_eq!(next(&mut rx).path, "new/c");
        next(&mut rx);
        std::fs::rename(t.path().join("w/a"), t.path().join("w/z")).unwrap();
        let e = next(&mut rx);
        assert_eq!(
            (e.kind, e.path.as_str(), e.to.as_deref()),
            (FileEventKind::Renamed, "a", Some("z"))
        );
        std::fs::remove_file(t.path().join("w/z")).unwrap();
        let e = next(&mut rx);
        assert_eq!((e.kind, e.path.as_str()), (FileEventKind::Removed, "z"));
    }

    #[test]
    fn a_symlink_out_is_not_watched() {
        let t = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(t.path().join("w")).unwrap();
        std::os::unix::fs::symlink(host.path(), t.path().join("w/out")).unwrap();
        // The base itself through a link to a host path resolves inside the root.
        assert!(start(Root::open_dir(t.path()).unwrap(), "/w/out").is_err());
        let mut rx = start(Root::open_dir(t.path()).unwrap(), "/w").unwrap();
        std::fs::write(host.path().join("secret"), b"x").unwrap();
        std::thread::sleep(Duration::from_millis(400));
        assert!(rx.try_recv().is_err());
    }
}
