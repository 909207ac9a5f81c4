//! The user a sandbox's commands run as: the manifest's `user` (an image's
//! `USER` by default), or one exec's or session's own.
//!
//! The spec is Docker's: `USER[:GROUP]`, each a name or a numeric id. It is
//! resolved inside the sandbox, against the sandbox's own `/etc/passwd` and
//! `/etc/group` (the image's, not the host's), by whatever starts the
//! command (the process backend's shim, the microVM's guest agent), as
//! Docker resolves it:
//! - a named user must exist in `/etc/passwd`; a numeric one need not;
//! - without a group, the user's primary group from `/etc/passwd`, or 0 for
//!   a numeric user it does not list;
//! - supplementary groups: the `/etc/group` entries that list the user's
//!   name (none when a group is given explicitly);
//! - `HOME`: the passwd entry's home directory, else `/`.
//!
//! The files are parsed here rather than through libc's `getpwnam`: that
//! reads the host's NSS configuration, and the callers resolve in a root
//! that is not the host's.

use crate::{Error, ErrorCode};

/// The longest name or id text accepted in a spec.
const MAX_PART: usize = 64;

/// A parsed `USER[:GROUP]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserSpec {
    pub user: String,
    pub group: Option<String>,
}

/// Who a command runs as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups.
    pub groups: Vec<u32>,
    pub home: String,
    /// The passwd name (`USER`, `LOGNAME`), else the uid as text.
    pub name: String,
}

impl Identity {
    /// The sandbox's root: what runs when no user is named.
    pub fn root() -> Identity {
        Identity {
            uid: 0,
            gid: 0,
            groups: vec![],
            home: "/root".into(),
            name: "root".into(),
        }
    }
}

fn valid_part(p: &str) -> bool {
    !p.is_empty()
        && p.len() <= MAX_PART
        && !p.starts_with('-')
        && p.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

impl UserSpec {
    /// Parse `USER[:GROUP]`; `field` names the input in the error
    /// (`user` of a manifest, of a request).
    pub fn parse(s: &str, field: &str) -> Result<UserSpec, Error> {
        let (user, group) = match s.split_once(':') {
            Some((u, g)) => (u, Some(g)),
            None => (s, None),
        };
        if !valid_part(user) || !group.is_none_or(valid_part) {
            let shown: String = s.chars().take(80).collect();
            return Err(Error::new(
                ErrorCode::InvalidArgument,
                format!(
                    "{field}: {shown:?} is not a user (NAME or UID, optionally :GROUP or :GID; \
                     names of [A-Za-z0-9._-], at most {MAX_PART} characters)"
                ),
            )
            .with_field(field));
        }
        Ok(UserSpec {
            user: user.to_string(),
            group: group.map(str::to_string),
        })
    }

    /// Resolve against the sandbox's `/etc/passwd` and `/etc/group` text
    /// (empty when the file is missing). The error is one line for the
    /// command's caller.
    pub fn resolve(&self, passwd: &str, group: &str) -> Result<Identity, String> {
        let entries: Vec<Vec<&str>> = passwd
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split(':').collect::<Vec<_>>())
            .filter(|f| f.len() >= 7)
            .collect();
        let numeric = self.user.parse::<u32>().ok();
        let entry = match numeric {
            Some(uid) => entries
                .iter()
                .find(|f| f[2].parse::<u32>().ok() == Some(uid)),
            None => entries.iter().find(|f| f[0] == self.user),
        };
        let (uid, primary, name, home) = match (numeric, entry) {
            (_, Some(f)) => {
                let uid = f[2]
                    .parse::<u32>()
                    .map_err(|_| format!("/etc/passwd has a bad uid for {:?}", f[0]))?;
                let gid = f[3]
                    .parse::<u32>()
                    .map_err(|_| format!("/etc/passwd has a bad gid for {:?}", f[0]))?;
                (uid, gid, Some(f[0]), f[5])
            }
            (Some(uid), None) => (uid, 0, None, "/"),
            (None, None) => {
                return Err(format!(
                    "unable to find user {}: no matching entries in /etc/passwd",
                    self.user
                ))
            }
        };
        let groups: Vec<Vec<&str>> = group
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split(':').collect::<Vec<_>>())
            .filter(|f| f.len() >= 4)
            .collect();
        let gid = match &self.group {
            None => primary,
            Some(g) => match g.parse::<u32>() {
                Ok(gid) => gid,
                Err(_) => groups
                    .iter()
                    .find(|f| f[0] == g)
                    .and_then(|f| f[2].parse::<u32>().ok())
                    .ok_or_else(|| {
                        format!("unable to find group {g}: no matching entries in /etc/group")
                    })?,
            },
        };
        let mut extra = Vec::new();
        if let (None, Some(name)) = (&self.group, name) {
            for f in &groups {
                if f[3].split(',').any(|m| m == name) {
                    if let Ok(id) = f[2].parse::<u32>() {
                        if id != gid && !extra.contains(&id) {
                            extra.push(id);
                        }
                    }
                }
            }
        }
        Ok(Identity {
            uid,
            gid,
            groups: extra,
            home: if home.is_empty() { "/" } else { home }.to_string(),
            name: name.map_or_else(|| uid.to_string(), str::to_string),
        })
    }
}

/// Resolve `spec` in the root at `root` (`/` for the guest agent, the
/// sandbox's root after entering its mount namespace for the shim).
pub fn resolve_in(root: &std::path::Path, spec: &str) -> Result<Identity, String> {
    let spec = UserSpec::parse(spec, "user").map_err(|e| e.message)?;
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap_or_default();
    spec.resolve(&read("etc/passwd"), &read("etc/group"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
                          # a comment\n\
                          app:x:1000:1000:App:/home/app:/bin/sh\n\
                          svc:x:1001:1002::/srv:/usr/sbin/nologin\n\
                          broken:x:notanumber:0::/:/bin/sh\n";
    const GROUP: &str = "root:x:0:\napp:x:1000:\nstaff:x:50:app,svc\nsvc:x:1002:\nweb:x:33:app\n";

    fn resolve(s: &str) -> Result<Identity, String> {
        UserSpec::parse(s, "user").unwrap().resolve(PASSWD, GROUP)
    }

    #[test]
    fn a_named_user_takes_its_passwd_entry_and_groups() {
        let id = resolve("app").unwrap();
        assert_eq!((id.uid, id.gid), (1000, 1000));
        assert_eq!(id.groups, vec![50, 33]);
        assert_eq!(id.home, "/home/app");
        assert_eq!(id.name, "app");
        assert_eq!(resolve("4242").unwrap().name, "4242");
    }

    #[test]
    fn a_numeric_user_is_looked_up_and_need_not_exist() {
        assert_eq!(resolve("1001").unwrap().gid, 1002);
        assert_eq!(resolve("1001").unwrap().home, "/srv");
        let id = resolve("4242").unwrap();
        assert_eq!((id.uid, id.gid, id.home.as_str()), (4242, 0, "/"));
        assert!(id.groups.is_empty());
    }

    #[test]
    fn an_explicit_group_wins_and_drops_supplementary_groups() {
        let id = resolve("app:staff").unwrap();
        assert_eq!((id.uid, id.gid), (1000, 50));
        assert!(id.groups.is_empty());
        assert_eq!(resolve("4242:7").unwrap().gid, 7);
        let e = resolve("app:nogroup").unwrap_err();
        assert!(e.contains("unable to find group nogroup"), "{e}");
    }

    #[test]
    fn unknown_names_and_broken_entries_are_errors() {
        let e = resolve("nobody2").unwrap_err();
        assert!(e.contains("unable to find user nobody2"), "{e}");
        assert!(resolve("broken").unwrap_err().contains("bad uid"));
        // No passwd at all: only numeric users work.
        let spec = UserSpec::parse("app", "user").unwrap();
        assert!(spec.resolve("", "").is_err());
        let spec = UserSpec::parse("0", "user").unwrap();
        assert_eq!(spec.resolve("", "").unwrap().uid, 0);
    }

    #[test]
    fn malformed_specs_are_refused_with_the_field() {
        for bad in [
            "",
            ":",
            "app:",
            ":grp",
            "a:b:c",
            "-rf",
            "a b",
            "x/y",
            &"a".repeat(65),
        ] {
            let e = UserSpec::parse(bad, "manifest.user").unwrap_err();
            assert_eq!(e.field.as_deref(), Some("manifest.user"), "{bad:?}");
        }
        let s = UserSpec::parse("app:staff", "user").unwrap();
        assert_eq!(
            (s.user.as_str(), s.group.as_deref()),
            ("app", Some("staff"))
        );
    }
}
