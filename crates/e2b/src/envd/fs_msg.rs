//! The messages of envd's `filesystem.Filesystem` service (proto3 JSON),
//! written from its `.proto` description, and their translation from the
//! control plane's file types (pure functions, tested here).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use stasis_core::{FileEntry, FileEvent, FileEventKind, FileKind, FileStat};

use super::owners::Accounts;
use super::pbjson;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct PathRequest {
    pub path: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct MoveRequest {
    pub source: String,
    pub destination: String,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ListDirRequest {
    pub path: String,
    #[serde(deserialize_with = "pbjson::de_u32")]
    pub depth: u32,
}

/// `WatchDirRequest` and `CreateWatcherRequest`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct WatchRequest {
    pub path: String,
    pub recursive: bool,
    #[serde(alias = "include_entry")]
    pub include_entry: bool,
    #[serde(alias = "allow_network_mounts")]
    pub allow_network_mounts: bool,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct WatcherRequest {
    #[serde(alias = "watcher_id")]
    pub watcher_id: String,
}

/// `filesystem.EntryInfo`.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EntryInfo {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub path: String,
    #[serde(serialize_with = "pbjson::ser_i64")]
    pub size: i64,
    pub mode: u32,
    pub permissions: String,
    pub owner: String,
    pub group: String,
    pub modified_time: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub symlink_target: Option<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct EntryResponse {
    pub entry: EntryInfo,
}

#[derive(Debug, Clone, Serialize)]
pub struct ListDirResponse {
    pub entries: Vec<EntryInfo>,
}

/// `filesystem.FilesystemEvent`.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FsEvent {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry: Option<EntryInfo>,
}

/// `WatchDirResponse` (a oneof).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub enum WatchEvent {
    Start {},
    Filesystem(Box<FsEvent>),
    Keepalive {},
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CreateWatcherResponse {
    pub watcher_id: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct GetWatcherEventsResponse {
    pub events: Vec<FsEvent>,
}

/// `filesystem.FileType` by name.
pub fn file_type(kind: FileKind) -> &'static str {
    match kind {
        FileKind::File => "FILE_TYPE_FILE",
        FileKind::Dir => "FILE_TYPE_DIRECTORY",
        FileKind::Symlink => "FILE_TYPE_SYMLINK",
        FileKind::Other => "FILE_TYPE_UNSPECIFIED",
    }
}

/// Go's `FileMode.String()`, as envd writes `permissions`: the type letter
/// (`d` directory, `L` symlink, `-` file) and `rwx` three times.
pub fn permissions(kind: FileKind, mode: u32) -> String {
    let mut s = String::with_capacity(10);
    s.push(match kind {
        FileKind::Dir => 'd',
        FileKind::Symlink => 'L',
        _ => '-',
    });
    for shift in [6, 3, 0] {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

/// The last name of an absolute path (`/` for the root).
pub fn base_name(path: &str) -> String {
    let t = path.trim_end_matches('/');
    match t.rsplit_once('/') {
        Some((_, n)) => n.to_string(),
        None if t.is_empty() => "/".to_string(),
        None => t.to_string(),
    }
}

/// `dir` joined with `name`.
pub fn join(dir: &str, name: &str) -> String {
    if dir.ends_with('/') {
        format!("{dir}{name}")
    } else {
        format!("{dir}/{name}")
    }
}

/// An entry's owner and group names (empty when the backend does not
/// report ids: an older guest agent).
fn owner_of(uid: Option<u32>, gid: Option<u32>, names: &Accounts) -> (String, String) {
    (
        uid.map(|u| names.user_name(u)).unwrap_or_default(),
        gid.map(|g| names.group_name(g)).unwrap_or_default(),
    )
}

fn entry(path: String, kind: FileKind, size: u64, mode: u32, mtime: i64) -> EntryInfo {
    EntryInfo {
        name: base_name(&path),
        kind: file_type(kind),
        size: size as i64,
        mode: mode & 0o7777,
        permissions: permissions(kind, mode),
        owner: String::new(),
        group: String::new(),
        modified_time: pbjson::timestamp(mtime),
        symlink_target: None,
        metadata: BTreeMap::new(),
        path,
    }
}

pub fn entry_of_stat(st: &FileStat, names: &Accounts) -> EntryInfo {
    let mut e = entry(st.path.clone(), st.kind, st.size, st.mode, st.mtime);
    e.symlink_target = st.symlink_target.clone();
    (e.owner, e.group) = owner_of(st.uid, st.gid, names);
    e.metadata = st.xattrs.clone().unwrap_or_default();
    e
}

pub fn entry_of_listing(dir: &str, f: &FileEntry, names: &Accounts) -> EntryInfo {
    let mut e = entry(join(dir, &f.name), f.kind, f.size, f.mode, f.mtime);
    (e.owner, e.group) = owner_of(f.uid, f.gid, names);
    e.metadata = f.xattrs.clone().unwrap_or_default();
    e
}

/// The absolute path a symlink at `link` pointing to `target` names
/// (`.` and `..` folded, never above `/`).
pub fn resolve_link(link: &str, target: &str) -> String {
    let dir = link
        .trim_end_matches('/')
        .rsplit_once('/')
        .map_or("", |(d, _)| d);
    let joined = if target.starts_with('/') {
        target.to_string()
    } else {
        format!("{dir}/{target}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for p in joined.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// `filesystem.EventType` by name.
pub fn event_type(kind: FileEventKind) -> &'static str {
    match kind {
        FileEventKind::Created => "EVENT_TYPE_CREATE",
        FileEventKind::Modified => "EVENT_TYPE_WRITE",
        FileEventKind::Removed => "EVENT_TYPE_REMOVE",
        FileEventKind::Renamed => "EVENT_TYPE_RENAME",
    }
}

/// The envd events of one control-plane event (a rename seen at both ends
/// is the old name renamed and the new one created, as envd reports it),
/// none when the watch is not recursive and the change is deeper.
pub fn events_of(ev: &FileEvent, recursive: bool) -> Vec<FsEvent> {
    let shallow = |p: &str| recursive || !p.trim_matches('/').contains('/');
    let mk = |name: &str, kind| FsEvent {
        name: name.trim_start_matches('/').to_string(),
        kind,
        entry: None,
    };
    let mut out = Vec::new();
    if shallow(&ev.path) {
        out.push(mk(&ev.path, event_type(ev.kind)));
    }
    if let (FileEventKind::Renamed, Some(to)) = (ev.kind, &ev.to) {
        if shallow(to) {
            out.push(mk(to, "EVENT_TYPE_CREATE"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_what_envd_writes() {
        let st = FileStat {
            path: "/home/user/a.txt".into(),
            kind: FileKind::File,
            size: 12,
            mode: 0o100644,
            mtime: 1_700_000_000,
            symlink_target: None,
            uid: Some(1000),
            gid: Some(1000),
            xattrs: None,
        };
        let names = Accounts {
            passwd: "root:x:0:0::/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n".into(),
            group: "root:x:0:\nuser:x:1000:\n".into(),
        };
        let v = serde_json::to_value(entry_of_stat(&st, &names)).unwrap();
        assert_eq!(v["name"], "a.txt");
        assert_eq!(v["type"], "FILE_TYPE_FILE");
        assert_eq!(v["path"], "/home/user/a.txt");
        assert_eq!(v["size"], "12");
        assert_eq!(v["mode"], 0o644);
        assert_eq!(v["permissions"], "-rw-r--r--");
        assert_eq!(v["modifiedTime"], "2023-11-14T22:13:20Z");
        assert!(v.get("symlinkTarget").is_none());
        // No metadata: no field (the SDK reads undefined).
        assert!(v.get("metadata").is_none());
        let meta: BTreeMap<String, String> = [("author".to_string(), "mish".to_string())].into();
        let with = FileStat {
            xattrs: Some(meta.clone()),
            ..st.clone()
        };
        let v = serde_json::to_value(entry_of_stat(&with, &names)).unwrap();
        assert_eq!(v["metadata"], serde_json::json!({"author": "mish"}));
        assert_eq!((&v["owner"], &v["group"]), (&"user".into(), &"user".into()));
        // Ids with no name are numbers; no ids (an older guest agent): empty.
        let old = FileStat {
            uid: None,
            gid: None,
            ..st.clone()
        };
        let e = entry_of_stat(&old, &names);
        assert_eq!((e.owner.as_str(), e.group.as_str()), ("", ""));
        let f = FileEntry {
            name: "d".into(),
            kind: FileKind::Dir,
            size: 0,
            mode: 0o755,
            mtime: 0,
            uid: Some(0),
            gid: Some(4242),
            xattrs: Some(meta.clone()),
        };
        let e = entry_of_listing("/", &f, &names);
        assert_eq!(
            (e.path.as_str(), e.permissions.as_str()),
            ("/d", "drwxr-xr-x")
        );
        assert_eq!((e.owner.as_str(), e.group.as_str()), ("root", "4242"));
        assert_eq!(e.metadata, meta);
        assert_eq!(permissions(FileKind::Symlink, 0o777), "Lrwxrwxrwx");
        assert_eq!(base_name("/"), "/");
        assert_eq!(base_name("/a/b/"), "b");
    }

    #[test]
    fn symlink_targets_resolve_to_absolute_paths() {
        assert_eq!(resolve_link("/w/d/link", "test.txt"), "/w/d/test.txt");
        assert_eq!(resolve_link("/w/d/link", "../x"), "/w/x");
        assert_eq!(resolve_link("/w/d/link", "/etc/hosts"), "/etc/hosts");
        assert_eq!(resolve_link("/link", "../../x"), "/x");
    }

    #[test]
    fn watch_events_follow_recursion() {
        let ev = |kind, path: &str, to: Option<&str>| FileEvent {
            kind,
            path: path.into(),
            to: to.map(str::to_string),
        };
        let top = events_of(&ev(FileEventKind::Created, "a.txt", None), false);
        assert_eq!(top.len(), 1);
        assert_eq!(
            (top[0].name.as_str(), top[0].kind),
            ("a.txt", "EVENT_TYPE_CREATE")
        );
        assert!(events_of(&ev(FileEventKind::Modified, "sub/a.txt", None), false).is_empty());
        let deep = events_of(&ev(FileEventKind::Modified, "sub/a.txt", None), true);
        assert_eq!(deep[0].kind, "EVENT_TYPE_WRITE");
        let mv = events_of(&ev(FileEventKind::Renamed, "a", Some("b")), false);
        let names: Vec<_> = mv.iter().map(|e| (e.name.as_str(), e.kind)).collect();
        assert_eq!(
            names,
            [("a", "EVENT_TYPE_RENAME"), ("b", "EVENT_TYPE_CREATE")]
        );
        let w = serde_json::to_value(WatchEvent::Filesystem(Box::new(top[0].clone()))).unwrap();
        assert_eq!(
            w,
            serde_json::json!({"filesystem": {"name": "a.txt", "type": "EVENT_TYPE_CREATE"}})
        );
        assert_eq!(
            serde_json::to_value(WatchEvent::Start {}).unwrap(),
            serde_json::json!({"start": {}})
        );
    }

    #[test]
    fn requests_in_either_field_spelling() {
        let a: WatchRequest =
            serde_json::from_str(r#"{"path":"/x","recursive":true,"includeEntry":true}"#).unwrap();
        assert!(a.recursive && a.include_entry);
        let b: WatchRequest =
            serde_json::from_str(r#"{"path":"/x","include_entry":true}"#).unwrap();
        assert!(b.include_entry && !b.recursive);
        let w: WatcherRequest = serde_json::from_str(r#"{"watcherId":"w1"}"#).unwrap();
        assert_eq!(w.watcher_id, "w1");
        let w: WatcherRequest = serde_json::from_str(r#"{"watcher_id":"w2"}"#).unwrap();
        assert_eq!(w.watcher_id, "w2");
        let l: ListDirRequest = serde_json::from_str(r#"{"path":"/","depth":2}"#).unwrap();
        assert_eq!(l.depth, 2);
    }
}
