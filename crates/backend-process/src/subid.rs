//! The host's subordinate id files (`/etc/subuid`, `/etc/subgid`): the id
//! ranges `useradd` hands to users for their rootless containers. A sandbox's
//! user namespace range must not overlap them (see [`crate::userns`]).
//!
//! Format (shadow-utils `subuid(5)`): one `owner:start:count` per line,
//! `owner` a user name or uid. Blank lines, `#` comments and malformed lines
//! name no range and are skipped.

use std::io;
use std::ops::Range;
use std::path::PathBuf;

/// The ranges listed in the text of a subuid/subgid file.
pub(crate) fn parse(text: &str) -> Vec<Range<u64>> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim();
            if l.is_empty() || l.starts_with('#') {
                return None;
            }
            let mut f = l.split(':');
            let (owner, start, count) = (f.next()?, f.next()?, f.next()?);
            if f.next().is_some() || owner.is_empty() {
                return None;
            }
            let start: u32 = start.trim().parse().ok()?;
            let count: u32 = count.trim().parse().ok()?;
            (count > 0).then(|| start as u64..start as u64 + count as u64)
        })
        .collect()
}

/// The ranges of every file in `files`; a missing file lists none.
pub(crate) fn read(files: &[PathBuf]) -> io::Result<Vec<Range<u64>>> {
    let mut out = Vec::new();
    for f in files {
        match std::fs::read(f) {
            Ok(data) => out.extend(parse(&String::from_utf8_lossy(&data))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("read {}: {e}", f.display()),
                ))
            }
        }
    }
    Ok(out)
}

/// Whether `start..start+len` shares an id with one of `ranges`.
pub(crate) fn overlaps(ranges: &[Range<u64>], start: u64, len: u64) -> bool {
    ranges
        .iter()
        .any(|r| r.start < start + len && start < r.end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_owner_start_count_lines_and_skips_the_rest() {
        let text = "\
# rootless containers
alice:100000:65536
1001:165536:65536

  bob : 231072 : 65536  \n\
carol:4294901760:65535
empty::65536
nostart:abc:10
zero:300000:0
neg:-1:10
toolarge:4294967296:1
extra:1:2:3
missing:5
:400000:10
dave:500000:10
";
        assert_eq!(
            parse(text),
            vec![
                100_000..165_536,
                165_536..231_072,
                231_072..296_608,
                4_294_901_760..4_294_967_295,
                500_000..500_010,
            ]
        );
        assert!(parse("").is_empty());
    }

    #[test]
    fn overlap_is_any_shared_id() {
        let r = [100_000..165_536, 500_000..500_010];
        assert!(overlaps(&r, 100_000, 65_536));
        assert!(overlaps(&r, 165_535, 1));
        assert!(overlaps(&r, 34_465, 65_536));
        assert!(overlaps(&r, 499_000, 2_000));
        assert!(!overlaps(&r, 165_536, 65_536));
        assert!(!overlaps(&r, 34_464, 65_536));
        assert!(!overlaps(&r, 500_010, 10));
        assert!(!overlaps(&[], 0, u32::MAX as u64));
    }

    #[test]
    fn reads_files_and_ignores_missing_ones() {
        let t = tempfile::tempdir().unwrap();
        let a = t.path().join("subuid");
        std::fs::write(&a, "u:100000:65536\n").unwrap();
        let b = t.path().join("subgid");
        std::fs::write(&b, "u:300000:65536\n").unwrap();
        let got = read(&[a, t.path().join("absent"), b]).unwrap();
        assert_eq!(got, vec![100_000..165_536, 300_000..365_536]);
        // A directory is not a readable file: a clear error, not "no ranges".
        let e = read(&[t.path().to_path_buf()]).unwrap_err();
        assert!(e.to_string().contains("read "), "{e}");
    }
}
