//! cgroup driver: detects cgroup v2 (unified, with the memory, cpu and pids
//! controllers available at the root) or falls back to the v1 hierarchies, and
//! drives whichever is there through plain cgroupfs writes.
//!
//! Layout (same relative path in every hierarchy used):
//!
//! ```text
//! <hierarchy>/<parent>/<sandbox-id>/          limits, freeze
//! <hierarchy>/<parent>/<sandbox-id>/init      the sandbox's init (+ its host-side waiter)
//! <hierarchy>/<parent>/<sandbox-id>/x<N>      one leaf per exec (kill its tree on timeout)
//! <hierarchy>/<parent>/<sandbox-id>/s<N>      one leaf per persistent session
//! <hierarchy>/<parent>/.supervisors/<sandbox-id>   the sandbox's supervisor
//! ```
//!
//! `<parent>` is the owning daemon's own group, `<cgroup-parent>/.daemon-<id>`
//! (see `ProcessConfig::own_cgroup`), or the shared parent itself for a
//! sandbox made before daemons had one (see `ProcessBackend::sandbox_for`).
//!
//! The supervisor (see `supervisor.rs`) sits beside the sandbox's node, not
//! under it: freezing the sandbox must not freeze it, and the sandbox's
//! memory and pids limits do not count it.
//!
//! Processes live only in leaves, which keeps v2's "no internal processes"
//! rule, and limits set on the sandbox node apply to all leaves (memory,
//! pids, cpu and freezer are hierarchical in both versions).

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use stasis_core::Resources;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

impl Version {
    pub fn as_str(self) -> &'static str {
        match self {
            Version::V1 => "v1",
            Version::V2 => "v2",
        }
    }
}

/// The controllers this backend uses.
pub const V1_CONTROLLERS: [&str; 5] = ["memory", "cpu", "cpuacct", "pids", "freezer"];
const V1_REQUIRED: [&str; 3] = ["memory", "pids", "freezer"];
const V2_REQUIRED: [&str; 3] = ["memory", "pids", "cpu"];

#[derive(Debug, Clone)]
pub struct Cgroups {
    pub version: Version,
    /// v2: the unified mount. v1: controller -> mount point of its hierarchy.
    pub v2_root: PathBuf,
    pub v1: BTreeMap<String, PathBuf>,
    /// v1 only: hierarchies without a controller we use, through which a
    /// service manager tracks its services (`name=systemd`, the hybrid
    /// cgroup2 mount). Our processes also move there, best effort, to the
    /// same relative path: a `systemctl restart` of the daemon, which kills
    /// its service's cgroup, must not reach sandboxes or their supervisors.
    pub service: Vec<PathBuf>,
}

fn read_trim(p: &Path) -> io::Result<String> {
    Ok(fs::read_to_string(p)?.trim().to_string())
}

fn write(p: &Path, v: &str) -> io::Result<()> {
    fs::write(p, v)
        .map_err(|e| io::Error::new(e.kind(), format!("write {v:?} to {}: {e}", p.display())))
}

impl Cgroups {
    /// Find a usable cgroup setup on this host: v2 when the unified hierarchy
    /// offers memory, cpu and pids; else v1 hierarchies from /proc/self/mountinfo.
    pub fn detect() -> Result<Cgroups, String> {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("read /proc/self/mountinfo: {e}"))?;
        Self::detect_from(&mountinfo, |root| {
            read_trim(&root.join("cgroup.controllers")).unwrap_or_default()
        })
    }

    /// [`Cgroups::detect`] over a given mountinfo text; `v2_controllers`
    /// returns the `cgroup.controllers` content of a cgroup2 mount.
    pub fn detect_from(
        mountinfo: &str,
        v2_controllers: impl Fn(&Path) -> String,
    ) -> Result<Cgroups, String> {
        let mut v2_mounts = Vec::new();
        let mut named = Vec::new();
        let mut v1 = BTreeMap::new();
        for line in mountinfo.lines() {
            // ... mount_point ... - fstype source super_options
            let Some((pre, post)) = line.split_once(" - ") else {
                continue;
            };
            let pre: Vec<&str> = pre.split(' ').collect();
            let post: Vec<&str> = post.split(' ').collect();
            if pre.len() < 5 || post.len() < 3 {
                continue;
            }
            let mount_point = PathBuf::from(pre[4]);
            match post[0] {
                "cgroup2" => v2_mounts.push(mount_point),
                "cgroup" => {
                    for opt in post[2].split(',') {
                        if V1_CONTROLLERS.contains(&opt) {
                            v1.entry(opt.to_string()).or_insert(mount_point.clone());
                        }
                    }
                    if post[2].split(',').any(|o| o.starts_with("name=")) {
                        named.push(mount_point);
                    }
                }
                _ => {}
            }
        }
        for root in &v2_mounts {
            let ctl = v2_controllers(root);
            let have: Vec<&str> = ctl.split_whitespace().collect();
            if V2_REQUIRED.iter().all(|c| have.contains(c)) {
                return Ok(Cgroups {
                    version: Version::V2,
                    v2_root: root.clone(),
                    v1: BTreeMap::new(),
                    service: Vec::new(),
                });
            }
        }
        let missing: Vec<&str> = V1_REQUIRED
            .iter()
            .copied()
            .filter(|c| !v1.contains_key(*c))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "no usable cgroups: cgroup2 lacks memory/cpu/pids and cgroup v1 lacks {}",
                missing.join(",")
            ));
        }
        let mut service = named;
        service.extend(v2_mounts);
        service.sort();
        service.dedup();
        Ok(Cgroups {
            version: Version::V1,
            v2_root: PathBuf::new(),
            v1,
            service,
        })
    }

    /// After joining the cgroups whose `cgroup.procs` files are `joined`:
    /// move the calling process, best effort, to the same relative path in
    /// the service-tracking hierarchies (see [`Cgroups::service`]).
    pub fn escape_service(&self, joined: &[PathBuf]) {
        let hs = self.hierarchies();
        let Some(rel) = joined.iter().find_map(|f| {
            let dir = f.parent()?;
            hs.iter().find_map(|h| dir.strip_prefix(h).ok())
        }) else {
            return;
        };
        let me = std::process::id().to_string();
        for s in &self.service {
            let d = s.join(rel);
            if fs::create_dir_all(&d).is_ok() {
                let _ = fs::write(d.join("cgroup.procs"), &me);
            }
        }
    }

    /// Every distinct hierarchy root this backend creates cgroups in.
    pub fn hierarchies(&self) -> Vec<PathBuf> {
        match self.version {
            Version::V2 => vec![self.v2_root.clone()],
            Version::V1 => {
                let mut v: Vec<PathBuf> = self.v1.values().cloned().collect();
                v.sort();
                v.dedup();
                v
            }
        }
    }

    /// The hierarchy that tracks membership and freezing (v1: freezer).
    fn tracker(&self) -> &Path {
        match self.version {
            Version::V2 => &self.v2_root,
            Version::V1 => &self.v1["freezer"],
        }
    }

    fn ctl(&self, controller: &str) -> Option<&Path> {
        match self.version {
            Version::V2 => Some(&self.v2_root),
            Version::V1 => self.v1.get(controller).map(|p| p.as_path()),
        }
    }

    pub fn controllers(&self) -> Vec<String> {
        match self.version {
            Version::V2 => read_trim(&self.v2_root.join("cgroup.controllers"))
                .unwrap_or_default()
                .split_whitespace()
                .map(String::from)
                .collect(),
            Version::V1 => self.v1.keys().cloned().collect(),
        }
    }

    pub fn sandbox(&self, parent: &str, id: &str) -> SandboxCgroup {
        SandboxCgroup {
            cg: self.clone(),
            parent: parent.to_string(),
            rel: PathBuf::from(parent).join(id),
        }
    }

    /// The cgroup of one sandbox's supervisor: `<parent>/.supervisors/<id>`.
    pub fn supervisor(&self, parent: &str, id: &str) -> SandboxCgroup {
        let p = format!("{parent}/{SUPERVISORS}");
        SandboxCgroup {
            cg: self.clone(),
            rel: PathBuf::from(&p).join(id),
            parent: p,
        }
    }

    /// Kill and remove the sandbox groups under `own` (a daemon's own
    /// group) and their supervisors' groups whose sandbox id is not in
    /// `keep`; nothing outside `own` is looked at.
    pub fn destroy_except(&self, own: &str, keep: &[&str]) -> io::Result<()> {
        for name in self.list_sandboxes(own) {
            if !keep.contains(&name.as_str()) {
                self.sandbox(own, &name).destroy()?;
            }
        }
        for name in self.list_sandboxes(&format!("{own}/{SUPERVISORS}")) {
            if !keep.contains(&name.as_str()) {
                self.supervisor(own, &name).destroy()?;
            }
        }
        Ok(())
    }

    /// At a daemon's stop: remove the groups under `own` (the daemon's own
    /// group) that hold no process, then `own` itself if it is empty, in
    /// every hierarchy including the service-tracking ones. A group with a
    /// process anywhere below it (a sandbox that outlives the daemon, its
    /// supervisor) stays whole, its empty leaves too.
    pub fn remove_empty(&self, own: &str) {
        let roots = self.hierarchies().into_iter().chain(self.service.clone());
        for root in roots {
            let own = root.join(own);
            let mut groups: Vec<PathBuf> = Vec::new();
            for d in [own.clone(), own.join(SUPERVISORS)] {
                if let Ok(rd) = fs::read_dir(&d) {
                    groups.extend(
                        rd.flatten()
                            .filter(|e| e.file_type().map(|t| t.is_dir()).unwrap_or(false))
                            .map(|e| e.path())
                            .filter(|p| p.file_name() != Some(SUPERVISORS.as_ref())),
                    );
                }
            }
            for g in groups {
                if procs_recursive(&g).is_empty() {
                    let mut dirs = Vec::new();
                    subdirs_deepest_first(&g, &mut dirs);
                    for d in dirs {
                        let _ = rmdir_settled(&d, Duration::from_millis(100));
                    }
                }
            }
            let _ = fs::remove_dir(own.join(SUPERVISORS));
            let _ = fs::remove_dir(&own);
        }
    }

    /// Names of the sandbox cgroups under `parent` (in any hierarchy).
    pub fn list_sandboxes(&self, parent: &str) -> Vec<String> {
        let mut out = Vec::new();
        for h in self.hierarchies() {
            if let Ok(rd) = fs::read_dir(h.join(parent)) {
                for e in rd.flatten() {
                    let name = e.file_name().to_string_lossy().into_owned();
                    // `.supervisors` is not a sandbox (ids never start with a dot).
                    if e.file_type().map(|t| t.is_dir()).unwrap_or(false) && !name.starts_with('.')
                    {
                        out.push(name);
                    }
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }
}

/// Directory (under each backend parent) holding the supervisors' cgroups.
pub const SUPERVISORS: &str = ".supervisors";

/// Subdirectories (recursive, deepest first) of a cgroup directory.
fn subdirs_deepest_first(dir: &Path, out: &mut Vec<PathBuf>) {
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                subdirs_deepest_first(&e.path(), out);
            }
        }
    }
    out.push(dir.to_path_buf());
}

/// Remove an empty cgroup directory. The kernel answers EBUSY for a short
/// while after the last task has exited (the exiting task still holds its
/// css_set until it is reaped), in every hierarchy it was in, so retry for
/// up to `patience` before giving up.
fn rmdir_settled(d: &Path, patience: Duration) -> io::Result<()> {
    let deadline = Instant::now() + patience;
    loop {
        match fs::remove_dir(d) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("rmdir {}: {e}", d.display()),
                ))
            }
        }
    }
}

fn procs_recursive(dir: &Path) -> Vec<i32> {
    let mut dirs = Vec::new();
    subdirs_deepest_first(dir, &mut dirs);
    let mut pids = Vec::new();
    for d in dirs {
        if let Ok(s) = fs::read_to_string(d.join("cgroup.procs")) {
            pids.extend(s.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
        }
    }
    pids
}

/// One sandbox's cgroup (the same relative path in every hierarchy).
#[derive(Debug, Clone)]
pub struct SandboxCgroup {
    cg: Cgroups,
    parent: String,
    rel: PathBuf,
}

impl SandboxCgroup {
    /// The group this one sits in (`<parent>`, or `<parent>/.supervisors`).
    pub fn parent(&self) -> &str {
        &self.parent
    }

    /// `<parent>/<sandbox-id>`, the path inside every hierarchy.
    pub fn rel_path(&self) -> &Path {
        &self.rel
    }

    pub fn version(&self) -> Version {
        self.cg.version
    }

    fn dirs(&self, sub: &str) -> Vec<PathBuf> {
        self.cg
            .hierarchies()
            .into_iter()
            .map(|h| {
                let p = h.join(&self.rel);
                if sub.is_empty() {
                    p
                } else {
                    p.join(sub)
                }
            })
            .collect()
    }

    fn tracker_dir(&self, sub: &str) -> PathBuf {
        let p = self.cg.tracker().join(&self.rel);
        if sub.is_empty() {
            p
        } else {
            p.join(sub)
        }
    }

    pub fn exists(&self) -> bool {
        self.tracker_dir("").is_dir()
    }

    /// Create the sandbox node and apply the limits. Idempotent.
    pub fn create(&self, r: &Resources) -> io::Result<()> {
        match self.cg.version {
            Version::V2 => {
                let root = &self.cg.v2_root;
                let enable = "+memory +pids +cpu";
                // Controllers must be enabled from the root down to the
                // sandbox node, through each level of the parent.
                write(&root.join("cgroup.subtree_control"), enable)?;
                let mut cur = root.clone();
                for comp in Path::new(&self.parent).components() {
                    cur = cur.join(comp);
                    mkdir(&cur)?;
                    write(&cur.join("cgroup.subtree_control"), enable)?;
                }
                let sb = root.join(&self.rel);
                mkdir(&sb)?;
                write(&sb.join("cgroup.subtree_control"), enable)?;
                write(&sb.join("memory.max"), &(r.memory_mb << 20).to_string())?;
                let swap = sb.join("memory.swap.max");
                if swap.exists() {
                    write(&swap, "0")?;
                }
                write(&sb.join("pids.max"), &r.pids.to_string())?;
                let quota = ((r.cpus * 100_000.0).round() as u64).max(1000);
                write(&sb.join("cpu.max"), &format!("{quota} 100000"))?;
            }
            Version::V1 => {
                for h in self.cg.hierarchies() {
                    let mut cur = h.clone();
                    for comp in self.rel.components() {
                        let next = cur.join(comp);
                        mkdir(&next)?;
                        init_cpuset(&cur, &next)?;
                        cur = next;
                    }
                }
                if let Some(m) = self.cg.ctl("memory") {
                    let sb = m.join(&self.rel);
                    let bytes = (r.memory_mb << 20).to_string();
                    write(&sb.join("memory.limit_in_bytes"), &bytes)?;
                    let memsw = sb.join("memory.memsw.limit_in_bytes");
                    if memsw.exists() {
                        write(&memsw, &bytes)?;
                    }
                    let sw = sb.join("memory.swappiness");
                    if sw.exists() {
                        let _ = write(&sw, "0");
                    }
                }
                if let Some(p) = self.cg.ctl("pids") {
                    write(&p.join(&self.rel).join("pids.max"), &r.pids.to_string())?;
                }
                if let Some(c) = self.cg.ctl("cpu") {
                    let sb = c.join(&self.rel);
                    let quota = ((r.cpus * 100_000.0).round() as u64).max(1000);
                    write(&sb.join("cpu.cfs_period_us"), "100000")?;
                    write(&sb.join("cpu.cfs_quota_us"), &quota.to_string())?;
                }
            }
        }
        Ok(())
    }

    /// Create this cgroup (and missing ancestors) without any limit and
    /// return the `cgroup.procs` files a process writes its pid into to join
    /// it (the supervisor's cgroup).
    pub fn create_plain(&self) -> io::Result<Vec<PathBuf>> {
        let mut files = Vec::new();
        for h in self.cg.hierarchies() {
            let mut cur = h.clone();
            for comp in self.rel.components() {
                let next = cur.join(comp);
                mkdir(&next)?;
                if self.cg.version == Version::V1 {
                    init_cpuset(&cur, &next)?;
                }
                cur = next;
            }
            files.push(cur.join("cgroup.procs"));
        }
        Ok(files)
    }

    /// Create a leaf and return the `cgroup.procs` files a process must write
    /// its pid into to join it (one per hierarchy).
    pub fn leaf(&self, name: &str) -> io::Result<Vec<PathBuf>> {
        let mut files = Vec::new();
        for d in self.dirs(name) {
            mkdir(&d)?;
            if self.cg.version == Version::V1 {
                init_cpuset(d.parent().unwrap(), &d)?;
            }
            files.push(d.join("cgroup.procs"));
        }
        Ok(files)
    }

    /// Remove a leaf if it is empty (ignored otherwise).
    pub fn remove_leaf(&self, name: &str) {
        for d in self.dirs(name) {
            let _ = fs::remove_dir(d);
        }
        for s in &self.cg.service {
            let _ = fs::remove_dir(s.join(&self.rel).join(name));
        }
    }

    /// Pids in the whole sandbox (or one leaf).
    pub fn procs(&self, leaf: &str) -> Vec<i32> {
        procs_recursive(&self.tracker_dir(leaf))
    }

    fn set_frozen(&self, dir: &Path, frozen: bool) -> io::Result<()> {
        match self.cg.version {
            Version::V2 => write(&dir.join("cgroup.freeze"), if frozen { "1" } else { "0" }),
            Version::V1 => write(
                &dir.join("freezer.state"),
                if frozen { "FROZEN" } else { "THAWED" },
            ),
        }
    }

    fn is_frozen(&self, dir: &Path) -> bool {
        match self.cg.version {
            Version::V2 => fs::read_to_string(dir.join("cgroup.events"))
                .map(|s| s.lines().any(|l| l.trim() == "frozen 1"))
                .unwrap_or(false),
            Version::V1 => read_trim(&dir.join("freezer.state"))
                .map(|s| s == "FROZEN")
                .unwrap_or(false),
        }
    }

    fn freeze_dir(&self, dir: &Path) -> io::Result<()> {
        self.set_frozen(dir, true)?;
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.is_frozen(dir) {
            if Instant::now() > deadline {
                let _ = self.set_frozen(dir, false);
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("cgroup {} did not freeze within 5s", dir.display()),
                ));
            }
            if self.cg.version == Version::V1 {
                // v1 retries the freeze of tasks that were busy on each write.
                let _ = self.set_frozen(dir, true);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(())
    }

    /// Freeze every process of the sandbox (CPU stops, memory stays).
    pub fn freeze(&self) -> io::Result<()> {
        self.freeze_dir(&self.tracker_dir(""))
    }

    pub fn thaw(&self) -> io::Result<()> {
        self.set_frozen(&self.tracker_dir(""), false)
    }

    pub fn frozen(&self) -> bool {
        self.is_frozen(&self.tracker_dir(""))
    }

    /// SIGKILL every process of the sandbox (`leaf` empty) or of one leaf,
    /// without a fork race (v2: cgroup.kill; v1: freeze, kill, thaw), and
    /// wait until they are gone.
    pub fn kill(&self, leaf: &str) -> io::Result<()> {
        let dir = self.tracker_dir(leaf);
        if !dir.is_dir() {
            return Ok(());
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let pids = procs_recursive(&dir);
            if pids.is_empty() {
                return Ok(());
            }
            match self.cg.version {
                Version::V2 => {
                    let _ = write(&dir.join("cgroup.kill"), "1");
                }
                Version::V1 => {
                    let froze = self.freeze_dir(&dir).is_ok();
                    for pid in procs_recursive(&dir) {
                        unsafe {
                            libc::kill(pid, libc::SIGKILL);
                        }
                    }
                    if froze || leaf.is_empty() {
                        let _ = self.set_frozen(&dir, false);
                    }
                    // A leaf under a frozen (paused) sandbox stays frozen
                    // until the sandbox is thawed; its killed tasks die then,
                    // so there is nothing to wait for now.
                    if !leaf.is_empty() && self.is_frozen(&self.tracker_dir("")) {
                        return Ok(());
                    }
                }
            }
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("processes {pids:?} of {} survived SIGKILL", dir.display()),
                ));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Kill everything and remove the sandbox's cgroups. Idempotent.
    ///
    /// A process can arrive after the kill: a shim forked just before (by the
    /// supervisor for a session) joins its leaf and then recreates its copy
    /// in the service-tracking hierarchies. So kill and remove in rounds
    /// until no directory of the sandbox is left, or give up after a bound.
    pub fn destroy(&self) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            self.kill("")?;
            // The controller hierarchies first (the tracker among them), then
            // the service-tracking copies; each deepest first.
            let roots: Vec<PathBuf> = self
                .dirs("")
                .into_iter()
                .chain(self.cg.service.iter().map(|s| s.join(&self.rel)))
                .collect();
            let mut last_err = None;
            for root in &roots {
                let mut dirs = Vec::new();
                subdirs_deepest_first(root, &mut dirs);
                for d in dirs {
                    if let Err(e) = rmdir_settled(&d, Duration::from_millis(250)) {
                        last_err = Some(e);
                    }
                }
            }
            if roots.iter().all(|r| !r.exists()) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(last_err.unwrap_or_else(|| {
                    io::Error::other(format!(
                        "cgroups of {} keep coming back",
                        self.rel.display()
                    ))
                }));
            }
        }
    }

    /// (cpu ns, memory bytes, process count)
    pub fn usage(&self) -> (u64, u64, u64) {
        let procs = self.procs("").len() as u64;
        match self.cg.version {
            Version::V2 => {
                let d = self.tracker_dir("");
                let cpu = fs::read_to_string(d.join("cpu.stat"))
                    .ok()
                    .and_then(|s| {
                        s.lines().find_map(|l| {
                            l.strip_prefix("usage_usec ").map(|v| v.trim().to_string())
                        })
                    })
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0)
                    * 1000;
                let mem = read_trim(&d.join("memory.current"))
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                (cpu, mem, procs)
            }
            Version::V1 => {
                let cpu = self
                    .cg
                    .ctl("cpuacct")
                    .and_then(|c| read_trim(&c.join(&self.rel).join("cpuacct.usage")).ok())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let mem = self
                    .cg
                    .ctl("memory")
                    .and_then(|c| read_trim(&c.join(&self.rel).join("memory.usage_in_bytes")).ok())
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                (cpu, mem, procs)
            }
        }
    }
}

fn mkdir(p: &Path) -> io::Result<()> {
    match fs::create_dir(p) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("mkdir {}: {e}", p.display()),
        )),
    }
}

/// A v1 hierarchy that carries cpuset needs cpus/mems copied into each new
/// cgroup before a task can join it.
fn init_cpuset(parent: &Path, child: &Path) -> io::Result<()> {
    for f in ["cpuset.cpus", "cpuset.mems"] {
        let c = child.join(f);
        if c.exists() && read_trim(&c).unwrap_or_default().is_empty() {
            let v = read_trim(&parent.join(f))?;
            write(&c, &v)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
35 28 0:30 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
36 35 0:31 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
37 35 0:32 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
38 35 0:33 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 35 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
40 35 0:35 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 35 0:36 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
42 35 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
";

    #[test]
    fn hybrid_host_uses_v1() {
        let c = Cgroups::detect_from(HYBRID, |_| "hugetlb".into()).unwrap();
        assert_eq!(c.version, Version::V1);
        assert_eq!(c.v1["freezer"], Path::new("/sys/fs/cgroup/freezer"));
        assert_eq!(c.hierarchies().len(), 5);
        // The hybrid cgroup2 mount and named hierarchies track services.
        assert_eq!(
            c.service,
            vec![
                PathBuf::from("/sys/fs/cgroup/systemd"),
                PathBuf::from("/sys/fs/cgroup/unified")
            ]
        );
    }

    #[test]
    fn unified_with_controllers_uses_v2() {
        let c =
            Cgroups::detect_from(HYBRID, |_| "cpuset cpu io memory hugetlb pids".into()).unwrap();
        assert_eq!(c.version, Version::V2);
        assert_eq!(
            c.hierarchies(),
            vec![PathBuf::from("/sys/fs/cgroup/unified")]
        );
        let pure = "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n";
        let c = Cgroups::detect_from(pure, |_| "cpu memory pids".into()).unwrap();
        assert_eq!(c.v2_root, Path::new("/sys/fs/cgroup"));
    }

    #[test]
    fn comounted_v1_and_missing_controllers() {
        let co = "36 35 0:31 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
38 35 0:33 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n\
39 35 0:34 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer\n\
40 35 0:35 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n";
        let c = Cgroups::detect_from(co, |_| String::new()).unwrap();
        assert_eq!(c.v1["cpu"], c.v1["cpuacct"]);
        assert_eq!(c.hierarchies().len(), 4);
        let none = "36 35 0:31 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
        assert!(Cgroups::detect_from(none, |_| String::new()).is_err());
    }
}
