//! Mount points as a file API must respect them: the list a process sees
//! (its `/proc/<pid>/mountinfo`), the directories that hold one, and the
//! error a remove or rename of, onto or across one answers. The checks
//! against the live filesystem (mount ids of an entry and its parent) are
//! the backends'; this is the part that is only text.

use std::collections::BTreeSet;

use crate::{Error, ErrorCode};

/// The mount points of a `mountinfo` text (field 5 of each line, with the
/// kernel's octal escapes of space, tab, newline and backslash undone),
/// as paths relative to the reading process's root.
pub fn mount_points(mountinfo: &str) -> Vec<String> {
    mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(unescape)
        .collect()
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], oct) {
            (b'\\', Some(d)) => {
                let v = d.iter().fold(0u32, |a, c| a * 8 + u32::from(c - b'0'));
                out.push(v as u8);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Every directory that holds a mount point below it (the proper ancestors
/// of each mount point other than `/` itself): moving or recursively
/// removing one of them would move or empty a mount.
pub fn holders(points: &[String]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for p in points {
        let mut cur = p.trim_end_matches('/');
        while let Some((parent, _)) = cur.rsplit_once('/') {
            if parent.is_empty() {
                break;
            }
            out.insert(parent.to_string());
            cur = parent;
        }
    }
    out
}

/// The refusal of an operation on `path`, which `what` describes (e.g. "is
/// a mount point", "holds the mount point /workspace/in").
pub fn refused(path: &str, what: &str) -> Error {
    Error::new(
        ErrorCode::MountPoint,
        format!(
            "{path} {what}: the file API does not remove, replace or move the sandbox's \
             mounts (its root, /proc, /dev, /sys, input mounts) nor move entries between them"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 0:21 / / rw,relatime - overlay overlay rw,lowerdir=/l
23 22 0:22 / /proc rw,nosuid - proc proc rw
24 22 0:23 / /dev rw,nosuid - tmpfs tmpfs rw,size=1024k
25 24 0:24 / /dev/pts rw - devpts devpts rw
26 22 8:1 /data /workspace/in\\040put ro - ext4 /dev/sda1 rw
";

    #[test]
    fn points_and_escapes() {
        assert_eq!(
            mount_points(INFO),
            ["/", "/proc", "/dev", "/dev/pts", "/workspace/in put"]
        );
        assert_eq!(unescape("a\\134b\\011c\\9"), "a\\b\tc\\9");
    }

    #[test]
    fn holders_are_proper_ancestors_but_not_root() {
        let h = holders(&mount_points(INFO));
        let want: BTreeSet<String> = ["/dev", "/workspace"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(h, want);
        assert!(holders(&["/".into(), "/proc".into()]).is_empty());
    }

    #[test]
    fn refusal_is_409_mount_point() {
        let e = refused("/proc", "is a mount point");
        assert_eq!((e.code, e.code.http_status()), (ErrorCode::MountPoint, 409));
        assert!(
            e.message.starts_with("/proc is a mount point"),
            "{}",
            e.message
        );
    }
}
