//! The QEMU command line and the QEMU process.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use stasis_core::{Error, Result};

use crate::jail::{lease_uid, JailConfig, JailSpec, UidLease};
use crate::qemu_jail::{self, Needs};
use crate::util;

/// File names inside a sandbox directory (QEMU runs with that directory as cwd).
pub const DISK: &str = "disk.qcow2";
pub const BASE_DISK: &str = "base.qcow2";
/// The guest RAM file of a sandbox that owns its RAM (`RamBacking::SharedFile`).
pub const RAM_FILE: &str = "memory.ram";
/// A link to a snapshot's RAM file that a restored sandbox maps copy-on-write
/// (`RamBacking::PrivateFile`): shared with the snapshot and its other forks,
/// never written.
pub const BASE_RAM: &str = "base.ram";
pub const CONSOLE_LOG: &str = "console.log";
pub const QEMU_LOG: &str = "qemu.log";
pub const AGENT_SOCK: &str = "agent.sock";
pub const QMP_SOCK: &str = "qmp.sock";
pub const PID_FILE: &str = "qemu.pid";
/// Prefix of QEMU's `-name`, which identifies our processes in /proc.
pub const NAME_PREFIX: &str = "stasis-";

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }
    /// The CPU model used with this accelerator. Under KVM, `-cpu host` alone
    /// aborts on these nested hosts ("failed to set MSR 0x10a").
    pub fn cpu(self) -> &'static str {
        match self {
            Accel::Kvm => "host,-arch-capabilities",
            Accel::Tcg => "max",
        }
    }
}

/// Where guest RAM lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RamBacking {
    /// Anonymous memory (QEMU's default).
    Anonymous,
    /// `memory-backend-memfd,share=on`: shared memory with no file to clean up
    /// and no writeback. A snapshot with `x-ignore-shared` leaves RAM out of
    /// the stream and copies the memfd (through /proc/<pid>/fd) instead.
    SharedMemfd,
    /// `memory-backend-file,share=off`: a private copy-on-write mapping of a
    /// saved RAM file, shared in the page cache between forks.
    PrivateFile(PathBuf),
    /// `memory-backend-file,share=on`: the sandbox's own RAM file, written in
    /// place. A pause saves only the device state (`x-ignore-shared`): the
    /// file is the RAM, kept on the host for a local resume and uploaded as
    /// it is.
    SharedFile(PathBuf),
}

impl RamBacking {
    /// RAM that a migration leaves out of its stream (`x-ignore-shared`):
    /// saved as a file of its own.
    pub fn is_shared(&self) -> bool {
        matches!(self, RamBacking::SharedMemfd | RamBacking::SharedFile(_))
    }
}

#[derive(Debug, Clone)]
pub struct Launch {
    pub qemu: PathBuf,
    /// Sandbox id (goes into `-name`).
    pub name: String,
    pub accel: Accel,
    pub memory_mb: u64,
    /// vCPUs (`-smp`); under TCG each is a host thread (multi-threaded TCG).
    pub vcpus: u32,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub append: String,
    /// `-incoming` URI; the VM then stays stopped (`-S`) until `cont`.
    pub incoming: Option<String>,
    /// A cold boot that waits (`-S`) for `cont`: the egress service is
    /// attached to QEMU's namespace before the guest runs its first
    /// instruction.
    pub paused: bool,
    pub ram: RamBacking,
    /// TCG translation buffer size in MiB (`-accel tcg,tb-size=`); bounds
    /// QEMU's per-guest code cache (QEMU 7.2 defaults to 1 GiB, touched as
    /// the guest runs new code).
    pub tcg_tb_mb: Option<u32>,
    /// The guest's NIC (see `net`).
    pub nic: crate::net::Nic,
    /// Read-only input disks: (image path, serial).
    pub inputs: Vec<(PathBuf, String)>,
    /// QEMU's seccomp filter (`-sandbox`, see `qemu_jail`).
    pub seccomp: bool,
}

/// QEMU's seccomp sandbox: no spawning, no privilege changes, no
/// resource control, no obsolete calls. (slirp opens sockets, which the
/// filter allows; nothing of QEMU forks.)
pub const SANDBOX: &str = "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny";

/// The microvm firmware: qboot, which boots -kernel directly.
pub const FIRMWARE: &str = "qboot.rom";

pub const DEFAULT_APPEND: &str = "console=ttyS0 reboot=t panic=-1 quiet";

impl Launch {
    /// The argument vector (without the binary). Relative paths are inside the
    /// sandbox directory, QEMU's working directory.
    pub fn args(&self) -> Vec<String> {
        let mut a: Vec<String> = Vec::new();
        let mut push = |xs: &[&str]| a.extend(xs.iter().map(|s| s.to_string()));
        let name = format!("{NAME_PREFIX}{}", self.name);
        // Guest RAM is always the memory backend object "mem", whatever backs
        // it, so the RAM block has the same name in every migration stream
        // and any saved state loads into any RAM backing.
        let machine = "microvm,x-option-roms=off,isa-serial=on,rtc=on,memory-backend=mem";
        // qboot loads -kernel/-initrd straight from fw_cfg. QEMU 8+ made
        // SeaBIOS microvm's default firmware, and with option ROMs off it
        // finds no kernel, so the firmware is named (a bare name is looked
        // up in QEMU's data directory; qemu-system-data ships it).
        push(&["-name", &name, "-M", machine, "-bios", FIRMWARE]);
        let accel = match (self.accel, self.tcg_tb_mb) {
            (Accel::Tcg, Some(mb)) => format!("tcg,tb-size={mb}"),
            (a, _) => a.as_str().to_string(),
        };
        push(&["-accel", &accel, "-cpu", self.accel.cpu()]);
        let mem = format!("{}", self.memory_mb);
        let smp = self.vcpus.max(1).to_string();
        push(&["-m", &mem, "-smp", &smp]);
        match &self.ram {
            RamBacking::Anonymous => {
                let obj = format!("memory-backend-ram,id=mem,size={}M", self.memory_mb);
                push(&["-object", &obj]);
            }
            RamBacking::SharedMemfd => {
                let obj = format!(
                    "memory-backend-memfd,id=mem,size={}M,share=on",
                    self.memory_mb
                );
                push(&["-object", &obj]);
            }
            RamBacking::SharedFile(p) => {
                let obj = format!(
                    "memory-backend-file,id=mem,size={}M,mem-path={},share=on",
                    self.memory_mb,
                    p.display()
                );
                push(&["-object", &obj]);
            }
            RamBacking::PrivateFile(p) => {
                // readonly=on,rom=off: the file is opened read-only (it is
                // shared with other forks and the snapshot) and mapped
                // private and writable (copy-on-write).
                let obj = format!(
                    "memory-backend-file,id=mem,size={}M,mem-path={},share=off,readonly=on,rom=off",
                    self.memory_mb,
                    p.display()
                );
                push(&["-object", &obj]);
            }
        }
        push(&["-nodefaults", "-no-user-config", "-nographic", "-no-reboot"]);
        if self.seccomp {
            push(&["-sandbox", SANDBOX]);
        }
        let kernel = self.kernel.display().to_string();
        let initrd = self.initrd.display().to_string();
        push(&[
            "-kernel",
            &kernel,
            "-initrd",
            &initrd,
            "-append",
            &self.append,
        ]);
        let serial = format!("file:{CONSOLE_LOG}");
        push(&["-serial", &serial]);
        let drive = format!("id=root,file={DISK},format=qcow2,if=none");
        push(&["-drive", &drive, "-device", "virtio-blk-device,drive=root"]);
        // Input disks after the root disk (which stays /dev/vda); the agent
        // finds them by serial. `readonly=on`: the guest cannot write them.
        for (i, (img, serial)) in self.inputs.iter().enumerate() {
            let drive = format!(
                "id=in{i},file={},format=raw,if=none,readonly=on",
                img.display().to_string().replace(',', ",,")
            );
            let dev = format!("virtio-blk-device,drive=in{i},serial={serial}");
            push(&["-drive", &drive, "-device", &dev]);
        }
        // The NIC sits where it always did (after the disks, before the
        // agent's port): device order is part of a saved memory state.
        if let Some(net) = self.nic.netdev() {
            let dev = format!("virtio-net-device,netdev={}", crate::net::NETDEV);
            push(&["-netdev", &net, "-device", &dev]);
        }
        push(&["-device", "virtio-serial-device"]);
        let chardev = format!("socket,id=agent,path={AGENT_SOCK},server=on,wait=off");
        push(&["-chardev", &chardev]);
        let port = format!(
            "virtserialport,chardev=agent,name={}",
            stasis_agent_proto::PORT_NAME
        );
        push(&["-device", &port]);
        let qmp = format!("unix:{QMP_SOCK},server=on,wait=off");
        push(&["-qmp", &qmp]);
        if let Some(uri) = &self.incoming {
            push(&["-S", "-incoming", uri]);
        } else if self.paused {
            push(&["-S"]);
        }
        a
    }
}

/// QEMU's stdout/stderr log, opened by the daemon in the directory a
/// previous (jailed, perhaps the guest's) QEMU could write: a symlink or
/// other non-file planted under the name is removed, never opened through.
fn open_log(path: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let open = || {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
    };
    match open() {
        Ok(f) if f.metadata()?.file_type().is_file() => return Ok(f),
        Ok(_) => {}
        Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENXIO)) => {}
        Err(e) => return Err(e.into()),
    }
    stasis_backend::fsafe::remove_nofollow(path)?;
    let f = open()?;
    if !f.metadata()?.file_type().is_file() {
        return Err(Error::backend(format!(
            "{} keeps being replaced: refusing to log there",
            path.display()
        )));
    }
    Ok(f)
}

/// `qemu.pid`, written while QEMU runs: replaced, never written through.
fn write_pid(dir: &Path, pid: i32) -> Result<()> {
    stasis_backend::fsafe::write_replace(&dir.join(PID_FILE), format!("{pid}\n").as_bytes(), 0o644)
}

/// A running (or exited) QEMU. Either our child, or a process found again
/// through its pid file after a daemon restart.
pub struct QemuProc {
    pub pid: i32,
    child: Option<Child>,
    /// The jail's init, our child (reaped once QEMU is gone).
    init: Option<i32>,
    exited: bool,
}

impl QemuProc {
    /// Start QEMU in `dir`, in its own session (it survives the daemon being
    /// killed), stderr/stdout appended to `qemu.log`, pid written to `qemu.pid`.
    /// With `jail`, QEMU starts unprivileged in its namespaces (see `qemu_jail`).
    pub fn spawn(
        launch: &Launch,
        dir: &Path,
        jail: Option<&crate::jail::JailSpec>,
    ) -> Result<QemuProc> {
        for f in [AGENT_SOCK, QMP_SOCK, PID_FILE] {
            let _ = std::fs::remove_file(dir.join(f));
        }
        let log = open_log(&dir.join(QEMU_LOG))?;
        if let Some(jail) = jail {
            let j = crate::jail::spawn(jail, &launch.qemu, &launch.args(), &log)?;
            write_pid(dir, j.child)?;
            return Ok(QemuProc {
                pid: j.child,
                child: None,
                init: Some(j.init),
                exited: false,
            });
        }
        let mut cmd = Command::new(&launch.qemu);
        cmd.args(launch.args())
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        let no_thp = no_huge_pages(launch);
        unsafe {
            cmd.pre_exec(move || {
                if libc::setsid() < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if no_thp {
                    libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| Error::backend(format!("cannot start {}: {e}", launch.qemu.display())))?;
        let pid = child.id() as i32;
        write_pid(dir, pid)?;
        Ok(QemuProc {
            pid,
            child: Some(child),
            init: None,
            exited: false,
        })
    }

    /// Find a QEMU of this sandbox again from its pid file; `None` when there
    /// is no such live process (a reused pid is recognized by `-name`).
    pub fn adopt(dir: &Path, sandbox: &str) -> Option<QemuProc> {
        let pid: i32 = std::fs::read_to_string(dir.join(PID_FILE))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        if !util::pid_alive(pid) || !is_our_qemu(pid, Some(sandbox)) {
            return None;
        }
        Some(QemuProc {
            pid,
            child: None,
            init: None,
            exited: false,
        })
    }

    pub fn alive(&mut self) -> bool {
        if self.exited {
            return false;
        }
        let alive = match &mut self.child {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => util::pid_alive(self.pid),
        };
        if !alive {
            if let Some(init) = self.init.take() {
                // QEMU is gone: its init exits right after reaping it.
                reap_init(init);
            }
        }
        if !alive {
            self.exited = true;
        }
        alive
    }

    /// Wait until the process has exited; false on timeout.
    pub async fn wait_exit(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.alive() {
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    /// SIGKILL and reap. Idempotent.
    pub async fn kill(&mut self) {
        if !self.alive() {
            return;
        }
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
        }
        if !self.wait_exit(Duration::from_secs(5)).await {
            tracing::error!(pid = self.pid, "QEMU did not die after SIGKILL");
        }
    }
}

/// Reap a jail's init once its QEMU is gone. It exits right after reaping
/// QEMU; should it not within a second, it is killed (which ends its pid
/// namespace). Never an unbounded wait: this runs on the async runtime.
fn reap_init(init: i32) {
    let mut status = 0;
    for round in 0..2 {
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            let r = unsafe { libc::waitpid(init, &mut status, libc::WNOHANG) };
            if r != 0 {
                return; // reaped, or not our child (any more)
            }
            if Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        if round == 0 {
            tracing::warn!(
                init,
                "jail init still there after its QEMU exited; killing it"
            );
            unsafe { libc::kill(init, libc::SIGKILL) };
        }
    }
    tracing::error!(init, "jail init did not exit after SIGKILL; left unreaped");
}

/// Is `pid` a QEMU started by this backend (for `sandbox`, when given)?
pub fn is_our_qemu(pid: i32, sandbox: Option<&str>) -> bool {
    sandbox_of(pid).is_some_and(|s| sandbox.is_none_or(|want| want == s))
}

/// The sandbox id in a QEMU process's `-name stasis-<id>`.
pub fn sandbox_of(pid: i32) -> Option<String> {
    let args = util::cmdline(pid);
    let exe = args.first()?;
    if !exe.contains("qemu-system") {
        return None;
    }
    let i = args.iter().position(|a| a == "-name")?;
    args.get(i + 1)?
        .strip_prefix(NAME_PREFIX)
        .map(|s| s.split(',').next().unwrap_or(s).to_string())
}

/// QEMU's version string ("7.2.22"), from `--version`.
pub fn qemu_version(qemu: &Path) -> Option<String> {
    let out = Command::new(qemu).arg("--version").output().ok()?;
    let s = String::from_utf8_lossy(&out.stdout);
    s.split_whitespace()
        .skip_while(|w| *w != "version")
        .nth(1)
        .map(str::to_string)
}

/// (Here, not in `qemu_jail`: the plan knows nothing of QEMU command
/// lines.)
/// Lease a uid, plan the jail of the QEMU `launch` describes (cwd `dir`)
/// and hand it its files. Keep the lease until QEMU has started.
pub fn prepare_jail(
    cfg: &JailConfig,
    launch: &Launch,
    dir: &Path,
    image_dir: &Path,
) -> Result<(UidLease, JailSpec)> {
    let lease = lease_uid(cfg, &launch.name)?;
    let mut files: Vec<PathBuf> = launch.inputs.iter().map(|(p, _)| p.clone()).collect();
    if let RamBacking::PrivateFile(p) = &launch.ram {
        files.push(p.clone());
    }
    let needs = Needs {
        qemu: &launch.qemu,
        firmware: FIRMWARE,
        kernel: &launch.kernel,
        initrd: &launch.initrd,
        disk: Path::new(DISK),
        files,
        kvm: launch.accel == Accel::Kvm,
        dir,
        image_dir,
    };
    let mut spec = qemu_jail::plan(lease.0, &needs)?;
    spec.no_thp = no_huge_pages(launch);
    let mut writable = vec![PathBuf::from(DISK)];
    if let RamBacking::SharedFile(p) = &launch.ram {
        writable.push(p.clone());
    }
    spec.prepare_dir(&writable, image_dir)?;
    Ok((lease, spec))
}

/// A restored guest (a fork) runs without transparent huge pages: QEMU
/// asks for them on its TCG code buffer, whose touched part is a fork's
/// largest private memory, and with 2 MiB pages each region it starts
/// writing costs 2 MiB however little code it holds.
pub fn no_huge_pages(launch: &Launch) -> bool {
    matches!(launch.ram, RamBacking::PrivateFile(_))
}

/// Remove the sockets and pid file a QEMU leaves in its sandbox dir.
pub(crate) fn cleanup_dir_files(dir: &Path) {
    for f in [AGENT_SOCK, QMP_SOCK, PID_FILE] {
        let _ = std::fs::remove_file(dir.join(f));
    }
}

/// The tails of qemu.log and the console log, for an error message.
pub(crate) fn diagnostics(dir: &Path, alive: bool) -> String {
    let q = util::log_tail(&dir.join(QEMU_LOG), 600);
    let c = util::log_tail(&dir.join(CONSOLE_LOG), 600);
    let mut s = String::new();
    if !alive {
        s.push_str(" (QEMU exited)");
    }
    if !q.is_empty() {
        s.push_str(&format!("; qemu.log: {q}"));
    }
    if !c.is_empty() {
        s.push_str(&format!("; console tail: {c}"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch() -> Launch {
        Launch {
            qemu: "/usr/bin/qemu-system-x86_64".into(),
            name: "sb-1".into(),
            accel: Accel::Tcg,
            memory_mb: 256,
            vcpus: 1,
            kernel: "/img/vmlinux".into(),
            initrd: "/img/initrd.img".into(),
            append: DEFAULT_APPEND.into(),
            incoming: None,
            paused: false,
            ram: RamBacking::Anonymous,
            tcg_tb_mb: None,
            nic: crate::net::Nic::None,
            inputs: Vec::new(),
            seccomp: true,
        }
    }

    #[test]
    fn builds_the_agreed_command_line() {
        let a = launch().args().join(" ");
        let want = "-name stasis-sb-1 -M microvm,x-option-roms=off,isa-serial=on,rtc=on,memory-backend=mem -bios qboot.rom \
            -accel tcg -cpu max -m 256 -smp 1 -object memory-backend-ram,id=mem,size=256M -nodefaults -no-user-config -nographic -no-reboot \
            -sandbox on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny \
            -kernel /img/vmlinux -initrd /img/initrd.img \
            -append console=ttyS0 reboot=t panic=-1 quiet -serial file:console.log \
            -drive id=root,file=disk.qcow2,format=qcow2,if=none -device virtio-blk-device,drive=root \
            -device virtio-serial-device -chardev socket,id=agent,path=agent.sock,server=on,wait=off \
            -device virtserialport,chardev=agent,name=org.stasis.agent.0 \
            -qmp unix:qmp.sock,server=on,wait=off";
        assert_eq!(a, want);
    }

    #[test]
    fn incoming_and_kvm_and_ram_files() {
        let mut l = launch();
        l.accel = Accel::Kvm;
        l.incoming = Some("defer".into());
        l.ram = RamBacking::PrivateFile("/snap/memory.ram".into());
        let a = l.args();
        let s = a.join(" ");
        assert!(s.contains("-accel kvm -cpu host,-arch-capabilities"), "{s}");
        let mut t = launch();
        t.tcg_tb_mb = Some(128);
        assert!(t
            .args()
            .join(" ")
            .contains("-accel tcg,tb-size=128 -cpu max"));
        let mut m = launch();
        m.ram = RamBacking::SharedMemfd;
        let ms = m.args().join(" ");
        assert!(
            ms.contains("-object memory-backend-memfd,id=mem,size=256M,share=on"),
            "{ms}"
        );
        assert!(ms.contains("memory-backend=mem"), "{ms}");
        assert!(s.contains("memory-backend=mem"), "{s}");
        assert!(
            s.contains("memory-backend-file,id=mem,size=256M,mem-path=/snap/memory.ram,share=off,readonly=on,rom=off"),
            "{s}"
        );
        // -incoming's URI is one argument.
        let i = a.iter().position(|x| x == "-incoming").unwrap();
        assert_eq!(a[i + 1], "defer");
        assert_eq!(a[i - 1], "-S");
    }

    #[test]
    fn nic_and_inputs_on_the_command_line() {
        let mut l = launch();
        assert!(!l.args().join(" ").contains("-netdev"));
        l.nic = crate::net::Nic::Open;
        l.paused = true;
        l.inputs = vec![("/sb/inputs/ab.ext4".into(), "stasis-in0".into())];
        let a = l.args();
        let i = a.iter().position(|x| x == "-netdev").unwrap();
        assert_eq!(
            a[i + 1],
            "user,id=net0,restrict=off,ipv6=off,net=10.0.2.0/24,host=10.0.2.2,dns=10.0.2.3"
        );
        assert_eq!(a[i + 3], "virtio-net-device,netdev=net0");
        let s = a.join(" ");
        // No guestfwd, nothing forked: the filter never allows spawning.
        assert!(!s.contains("guestfwd"), "{s}");
        assert!(s.contains(&format!("-sandbox {SANDBOX}")), "{s}");
        assert!(SANDBOX.contains("spawn=deny") && SANDBOX.contains("elevateprivileges=deny"));
        // A paused cold boot waits for `cont`.
        assert_eq!(a.last().unwrap(), "-S");
        l.seccomp = false;
        assert!(!l.args().contains(&"-sandbox".to_string()));
        let root = s.find("drive=root").unwrap();
        let input = s
            .find("-drive id=in0,file=/sb/inputs/ab.ext4,format=raw,if=none,readonly=on -device virtio-blk-device,drive=in0,serial=stasis-in0")
            .unwrap();
        let nic = s.find("-netdev").unwrap();
        let agent = s.find("virtio-serial-device").unwrap();
        assert!(root < input && input < nic && nic < agent, "{s}");
    }

    #[test]
    fn finds_no_qemu_in_ordinary_processes() {
        assert_eq!(sandbox_of(std::process::id() as i32), None);
    }

    /// Names a previous QEMU planted in the sandbox directory (a symlink to
    /// a host file, a FIFO) are replaced: the log and the pid file are
    /// never opened through them.
    #[test]
    fn log_and_pid_file_are_never_written_through_a_planted_name() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let passwd = d.path().join("passwd");
        std::fs::write(&passwd, "root:x:0:0\n").unwrap();
        std::fs::set_permissions(&passwd, std::fs::Permissions::from_mode(0o600)).unwrap();
        let sb = d.path().join("sb");
        std::fs::create_dir(&sb).unwrap();
        std::os::unix::fs::symlink(&passwd, sb.join(QEMU_LOG)).unwrap();
        std::os::unix::fs::symlink(&passwd, sb.join(PID_FILE)).unwrap();
        use std::io::Write;
        open_log(&sb.join(QEMU_LOG))
            .unwrap()
            .write_all(b"qemu says\n")
            .unwrap();
        write_pid(&sb, 4242).unwrap();
        assert_eq!(std::fs::read_to_string(&passwd).unwrap(), "root:x:0:0\n");
        assert_eq!(
            std::fs::read_to_string(sb.join(QEMU_LOG)).unwrap(),
            "qemu says\n"
        );
        assert_eq!(
            std::fs::read_to_string(sb.join(PID_FILE)).unwrap(),
            "4242\n"
        );
        for n in [QEMU_LOG, PID_FILE] {
            assert!(std::fs::symlink_metadata(sb.join(n))
                .unwrap()
                .file_type()
                .is_file());
        }
        // A FIFO (which would block the daemon) is replaced too; a log that
        // is a real file is appended to.
        std::fs::remove_file(sb.join(QEMU_LOG)).unwrap();
        nix::unistd::mkfifo(
            &sb.join(QEMU_LOG),
            nix::sys::stat::Mode::from_bits_truncate(0o666),
        )
        .unwrap();
        open_log(&sb.join(QEMU_LOG))
            .unwrap()
            .write_all(b"a")
            .unwrap();
        open_log(&sb.join(QEMU_LOG))
            .unwrap()
            .write_all(b"b")
            .unwrap();
        assert_eq!(std::fs::read_to_string(sb.join(QEMU_LOG)).unwrap(), "ab");
    }
}
