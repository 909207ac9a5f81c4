//! Watching a directory for the host (`Request::WatchPoll`): the agent
//! keeps, per watch, what the tree under the directory looked like (path,
//! inode, size, mtime; symlinks not followed) and answers each poll with the
//! differences since the last one, waiting up to `wait_ms` for some. A file
//! that vanished and one that appeared with its inode are a rename. Changes
//! within one scan interval coalesce (a file created and written shows as
//! created). A watch not polled for a minute is dropped.

use crate::AgentError;
use stasis_core::{FileEvent, FileEventKind};
use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Most entries one watch follows (deeper ones are not seen).
const MAX_ENTRIES: usize = 20_000;
/// How often a waiting poll rescans.
const SCAN_EVERY: Duration = Duration::from_millis(100);
/// A watch not polled this long is dropped.
const IDLE_DROP: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, PartialEq, Eq)]
struct Seen {
    ino: u64,
    size: u64,
    mtime_ns: i64,
    dir: bool,
}

struct Watch {
    root: PathBuf,
    seen: BTreeMap<String, Seen>,
    polled: Instant,
}

#[derive(Default)]
pub struct Watches {
    all: Mutex<HashMap<String, Watch>>,
}

fn scan(root: &Path) -> Result<BTreeMap<String, Seen>, AgentError> {
    let md = std::fs::metadata(root).map_err(|e| AgentError::io(root, e))?;
    if !md.is_dir() {
        return Err(AgentError::invalid(format!(
            "{} is not a directory",
            root.display()
        )));
    }
    let dev = md.dev();
    let mut out = BTreeMap::new();
    let mut stack = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, rel)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            if out.len() >= MAX_ENTRIES {
                return Ok(out);
            }
            let Ok(md) = e.path().symlink_metadata() else {
                continue;
            };
            let name = e.file_name().to_string_lossy().into_owned();
            let path = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let dir_entry = md.file_type().is_dir();
            // Not into another mount (/proc, an input disk).
            if dir_entry && md.dev() == dev {
                stack.push((e.path(), path.clone()));
            }
            out.insert(
                path,
                Seen {
                    ino: md.ino(),
                    size: md.len(),
                    mtime_ns: md.mtime() * 1_000_000_000 + md.mtime_nsec(),
                    dir: dir_entry,
                },
            );
        }
    }
    Ok(out)
}

fn diff(old: &BTreeMap<String, Seen>, new: &BTreeMap<String, Seen>) -> Vec<FileEvent> {
    let ev = |kind, path: &str, to: Option<&str>| FileEvent {
        kind,
        path: path.to_string(),
        to: to.map(str::to_string),
    };
    let mut removed: Vec<(&String, &Seen)> =
        old.iter().filter(|(p, _)| !new.contains_key(*p)).collect();
    let mut created: Vec<(&String, &Seen)> =
        new.iter().filter(|(p, _)| !old.contains_key(*p)).collect();
    let mut out = Vec::new();
    // A rename: gone here, there with the same inode.
    removed.retain(|(rp, rs)| {
        match created
            .iter()
            .position(|(_, cs)| cs.ino == rs.ino && cs.dir == rs.dir)
        {
            Some(i) => {
                let (cp, _) = created.remove(i);
                out.push(ev(FileEventKind::Renamed, rp, Some(cp)));
                false
            }
            None => true,
        }
    });
    for (p, _) in created {
        out.push(ev(FileEventKind::Created, p, None));
    }
    for (p, s) in new {
        if let Some(o) = old.get(p) {
            if !s.dir && (o.size != s.size || o.mtime_ns != s.mtime_ns || o.ino != s.ino) {
                out.push(ev(FileEventKind::Modified, p, None));
            }
        }
    }
    for (p, _) in removed {
        out.push(ev(FileEventKind::Removed, p, None));
    }
    out
}

impl Watches {
    /// Start a watch of `path` (`watch` None: answers its id and no events)
    /// or the changes since the last poll of `watch`.
    pub fn poll(
        &self,
        watch: Option<String>,
        path: &str,
        wait_ms: u64,
    ) -> Result<(String, Vec<FileEvent>), AgentError> {
        let now = Instant::now();
        let id = match watch {
            None => {
                let root = PathBuf::from(path);
                let seen = scan(&root)?;
                let id = crate::random_hex(8);
                let mut all = self.all.lock().unwrap_or_else(|p| p.into_inner());
                all.retain(|_, w| now.duration_since(w.polled) < IDLE_DROP);
                all.insert(
                    id.clone(),
                    Watch {
                        root,
                        seen,
                        polled: now,
                    },
                );
                return Ok((id, Vec::new()));
            }
            Some(id) => id,
        };
        // Out of the table while this poll waits (another poll of the same
        // watch finds it missing and fails, as it should).
        let mut w = self
            .all
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id)
            .ok_or_else(|| AgentError::not_found(format!("watch {id}")))?;
        let deadline = now + Duration::from_millis(wait_ms.min(30_000));
        let events = loop {
            let Ok(seen) = scan(&w.root) else {
                // The directory is gone: the watch ends.
                return Err(AgentError::not_found(format!(
                    "watched directory {}",
                    w.root.display()
                )));
            };
            let events = diff(&w.seen, &seen);
            w.seen = seen;
            if !events.is_empty() || Instant::now() >= deadline {
                break events;
            }
            std::thread::sleep(SCAN_EVERY);
        };
        w.polled = Instant::now();
        self.all
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), w);
        Ok((id, events))
    }

    pub fn stop(&self, watch: &str) {
        self.all
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(watch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn polls_report_changes_relative_to_the_watched_dir() {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("sub")).unwrap();
        let w = Watches::default();
        let root = t.path().to_str().unwrap();
        let (id, ev) = w.poll(None, root, 0).unwrap();
        assert!(ev.is_empty());
        std::fs::write(t.path().join("sub/a"), b"1").unwrap();
        let (_, ev) = w.poll(Some(id.clone()), root, 1000).unwrap();
        assert_eq!(
            (ev[0].kind, ev[0].path.as_str()),
            (FileEventKind::Created, "sub/a")
        );
        std::fs::write(t.path().join("sub/a"), b"22").unwrap();
        let (_, ev) = w.poll(Some(id.clone()), root, 1000).unwrap();
        assert_eq!(
            (ev[0].kind, ev[0].path.as_str()),
            (FileEventKind::Modified, "sub/a")
        );
        std::fs::rename(t.path().join("sub/a"), t.path().join("b")).unwrap();
        let (_, ev) = w.poll(Some(id.clone()), root, 1000).unwrap();
        assert_eq!(
            (ev[0].kind, ev[0].path.as_str(), ev[0].to.as_deref()),
            (FileEventKind::Renamed, "sub/a", Some("b"))
        );
        std::fs::remove_file(t.path().join("b")).unwrap();
        let (_, ev) = w.poll(Some(id.clone()), root, 1000).unwrap();
        assert_eq!(
            (ev[0].kind, ev[0].path.as_str()),
            (FileEventKind::Removed, "b")
        );
        // Nothing changed: the poll waits, then answers none.
        let (_, ev) = w.poll(Some(id.clone()), root, 150).unwrap();
        assert!(ev.is_empty());
        w.stop(&id);
        assert_eq!(w.poll(Some(id), root, 0).unwrap_err().code, "not_found");
        assert!(w.poll(None, "/nonexistent-dir", 0).is_err());
    }
}
