//! Owners as envd has them: files and directories the edge creates belong
//! to the user a request names (E2B's `username`, or the `Authorization:
//! Basic <user:>` of a Connect call), by default the sandbox's own user (its
//! manifest's `user`: `user` in E2B's base template; root without one); and
//! an entry's `owner`/`group` are names again.
//!
//! Names are resolved against the sandbox's own `/etc/passwd` and
//! `/etc/group`, read through the file API on each request (so an account
//! added inside the sandbox counts at once). A user that is not found is an
//! error (`invalid_argument`), never a silent fallback to root: a missing
//! `/etc/passwd` finds no named user either (a numeric one needs no entry,
//! and root is root without any). An owner with no name is shown as its
//! number, as `ls` shows it.

use stasis_core::user::UserSpec;
use stasis_core::{Error, ErrorCode, FileOp};

use super::Caller;
use crate::E2b;

/// The most of `/etc/passwd` or `/etc/group` read.
const ACCOUNTS_LIMIT: u64 = 1024 * 1024;

/// A sandbox's `/etc/passwd` and `/etc/group` (empty when missing).
#[derive(Debug, Clone, Default)]
pub struct Accounts {
    pub passwd: String,
    pub group: String,
}

/// The name of `id` in a `name:x:id:...` file, if it lists it.
fn name_in(text: &str, id: u32) -> Option<&str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(':').collect::<Vec<_>>())
        .find(|f| f.len() >= 3 && f[2].parse::<u32>().ok() == Some(id))
        .map(|f| f[0])
        .filter(|n| !n.is_empty())
}

impl Accounts {
    /// The user name of `uid`, else the number.
    pub fn user_name(&self, uid: u32) -> String {
        name_in(&self.passwd, uid).map_or_else(|| uid.to_string(), str::to_string)
    }

    /// The group name of `gid`, else the number.
    pub fn group_name(&self, gid: u32) -> String {
        name_in(&self.group, gid).map_or_else(|| gid.to_string(), str::to_string)
    }

    /// The `(uid, gid)` of a user (`NAME[:GROUP]` or ids, as the manifest's
    /// `user`): its passwd entry's primary group unless one is named.
    pub fn resolve(&self, user: &str, field: &str) -> Result<(u32, u32), Error> {
        let spec = UserSpec::parse(user, field)?;
        let id = spec
            .resolve(&self.passwd, &self.group)
            .map_err(|m| Error::invalid(m).with_field(field))?;
        Ok((id.uid, id.gid))
    }
}

/// The user files are given to: the one named (`""` and E2B's `user` mean
/// the sandbox's default, as for commands), else the manifest's; `None`
/// for root.
pub fn wanted(requested: Option<&str>, manifest_user: Option<&str>) -> Option<String> {
    let name = match requested.map(str::trim) {
        None | Some("") | Some("user") => manifest_user?,
        Some(n) => n,
    };
    match name {
        "root" | "0" => None,
        n => Some(n.to_string()),
    }
}

/// `path` absolute (relative to `workdir`), `.` and `..` folded lexically
/// (never above `/`), as the backends normalize it.
pub fn absolute(workdir: &str, path: &str) -> String {
    let full = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{}/{path}", workdir.trim_end_matches('/'))
    };
    let mut parts: Vec<&str> = Vec::new();
    for c in full.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

/// The directories of `dir` and above it, deepest first, up to (not
/// including) the root.
pub fn ancestors(dir: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut p = dir.trim_end_matches('/');
    while !p.is_empty() {
        out.push(p.to_string());
        p = p.rsplit_once('/').map_or("", |(up, _)| up);
    }
    out
}

/// The sandbox's accounts, read through the file API (a file that is not
/// there is empty).
pub async fn load(st: &E2b, c: &Caller) -> Result<Accounts, Error> {
    let m = &st.manager;
    let len = ACCOUNTS_LIMIT.min(m.config().max_file_bytes);
    let read = |p: &'static str| async move {
        match m.read_range(&c.ctx, &c.id, p, 0, len).await {
            Ok((d, _)) => Ok(String::from_utf8_lossy(&d).into_owned()),
            Err(e) if e.code == ErrorCode::NotFound && !e.message.starts_with("sandbox ") => {
                Ok(String::new())
            }
            Err(e) => Err(e),
        }
    };
    Ok(Accounts {
        passwd: read("/etc/passwd").await?,
        group: read("/etc/group").await?,
    })
}

/// The accounts for showing owners: a sandbox whose files cannot be read
/// shows numbers (the entry itself was read, so this is not the request's
/// error).
pub async fn names(st: &E2b, c: &Caller) -> Accounts {
    load(st, c).await.unwrap_or_default()
}

/// Who a request's files go to.
pub struct Target {
    /// `None` for root: nothing to change (the file API creates files as
    /// root, and an overwritten file keeps its owner, as a write by root
    /// does).
    pub owner: Option<(u32, u32)>,
    /// The sandbox's workdir (relative paths are relative to it).
    pub workdir: String,
    /// The accounts, when they were read.
    pub accounts: Option<Accounts>,
}

/// Who the files of a request naming `requested` go to (`field` names it
/// in an error).
pub async fn target(
    st: &E2b,
    c: &Caller,
    requested: Option<&str>,
    field: &str,
) -> Result<Target, Error> {
    let rec = st.manager.get(&c.ctx, &c.id).await?;
    let workdir = rec.manifest.workdir.clone();
    let Some(name) = wanted(requested, rec.manifest.user.as_deref()) else {
        return Ok(Target {
            owner: None,
            workdir,
            accounts: None,
        });
    };
    let accounts = load(st, c).await?;
    let ids = accounts.resolve(&name, field)?;
    Ok(Target {
        owner: (ids != (0, 0)).then_some(ids),
        workdir,
        accounts: Some(accounts),
    })
}

/// Make the directory `dir` with its parents, and give the ones this made
/// to `owner`.
pub async fn make_dirs(
    st: &E2b,
    c: &Caller,
    dir: &str,
    owner: Option<(u32, u32)>,
    workdir: &str,
) -> Result<(), Error> {
    let m = &st.manager;
    let dir = absolute(workdir, dir);
    let mut made = Vec::new();
    if owner.is_some() {
        for p in ancestors(&dir) {
            if m.exists(&c.ctx, &c.id, &p).await? {
                break;
            }
            made.push(p);
        }
    }
    let op = FileOp::Mkdir {
        path: dir,
        parents: true,
    };
    m.file_op(&c.ctx, &c.id, op).await?;
    if let Some(o) = owner {
        // Top down, as they were made.
        for p in made.into_iter().rev() {
            give(st, c, &p, o).await?;
        }
    }
    Ok(())
}

/// Give the entry at `path` itself to `(uid, gid)`.
pub async fn give(st: &E2b, c: &Caller, path: &str, (uid, gid): (u32, u32)) -> Result<(), Error> {
    let op = FileOp::Chown {
        path: path.to_string(),
        uid,
        gid,
    };
    st.manager.file_op(&c.ctx, &c.id, op).await
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD: &str = "root:x:0:0:root:/root:/bin/bash\n\
                          nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n\
                          user:x:1000:1000::/home/user:/bin/bash\n\
                          app:x:1001:100::/srv:/bin/sh\n";
    const GROUP: &str = "root:x:0:\nusers:x:100:\nsudo:x:27:user\nuser:x:1000:\n";

    fn accounts() -> Accounts {
        Accounts {
            passwd: PASSWD.into(),
            group: GROUP.into(),
        }
    }

    #[test]
    fn ids_map_to_names_or_numbers() {
        let a = accounts();
        assert_eq!(a.user_name(1000), "user");
        assert_eq!(a.group_name(1000), "user");
        assert_eq!(
            (a.user_name(0), a.group_name(0)),
            ("root".into(), "root".into())
        );
        assert_eq!(a.group_name(100), "users");
        // No entry: the number, as `ls` shows it.
        assert_eq!(
            (a.user_name(4242), a.group_name(4242)),
            ("4242".into(), "4242".into())
        );
        let none = Accounts::default();
        assert_eq!(none.user_name(1000), "1000");
    }

    #[test]
    fn names_resolve_to_ids() {
        let a = accounts();
        assert_eq!(a.resolve("user", "username").unwrap(), (1000, 1000));
        assert_eq!(a.resolve("app", "username").unwrap(), (1001, 100));
        assert_eq!(a.resolve("app:user", "username").unwrap(), (1001, 1000));
        assert_eq!(a.resolve("2000", "username").unwrap(), (2000, 0));
        let e = a.resolve("ghost", "username").unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
        assert!(
            e.message.contains("unable to find user ghost"),
            "{}",
            e.message
        );
        assert!(a.resolve("../etc", "username").is_err());
        // No /etc/passwd: no named user is found (not root instead).
        let e = Accounts::default().resolve("user", "username").unwrap_err();
        assert!(e.message.contains("/etc/passwd"), "{}", e.message);
    }

    #[test]
    fn the_default_user_is_the_manifests() {
        // E2B's base template: manifest user `user`.
        assert_eq!(wanted(None, Some("user")).as_deref(), Some("user"));
        assert_eq!(wanted(Some(""), Some("user")).as_deref(), Some("user"));
        assert_eq!(wanted(Some("user"), Some("user")).as_deref(), Some("user"));
        assert_eq!(wanted(Some("root"), Some("user")), None);
        assert_eq!(wanted(Some("app"), Some("user")).as_deref(), Some("app"));
        // A sandbox without a manifest user: root, as its commands.
        assert_eq!(wanted(None, None), None);
        assert_eq!(wanted(Some("user"), None), None);
        assert_eq!(wanted(Some("app"), None).as_deref(), Some("app"));
        // Another image's default user.
        assert_eq!(wanted(Some("user"), Some("node")).as_deref(), Some("node"));
    }

    #[test]
    fn paths_and_their_parents() {
        assert_eq!(absolute("/home/user", "a/b"), "/home/user/a/b");
        assert_eq!(absolute("/home/user", "/x/./y/../z/"), "/x/z");
        assert_eq!(absolute("/", "../../a"), "/a");
        assert_eq!(
            ancestors("/home/user/a"),
            ["/home/user/a", "/home/user", "/home"]
        );
        assert!(ancestors("/").is_empty());
    }
}
