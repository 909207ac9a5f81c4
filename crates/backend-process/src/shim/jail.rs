//! The jail of every sandbox process (PID 1 and each exec): dropped
//! capabilities and the seccomp filter, and the syscalls it denies.

/// Capabilities kept inside the sandbox (Docker's default set). Everything
/// else (CAP_SYS_ADMIN, CAP_SYS_MODULE, CAP_SYS_PTRACE, CAP_NET_ADMIN,
/// CAP_MKNOD, CAP_DAC_READ_SEARCH, CAP_SYS_RAWIO, CAP_BPF, ...) is dropped
/// from the bounding set, so not even a later exec of a setuid binary gets it.
const KEEP_CAPS: [u32; 13] = [
    0,  // CHOWN
    1,  // DAC_OVERRIDE
    3,  // FOWNER
    4,  // FSETID
    5,  // KILL
    6,  // SETGID
    7,  // SETUID
    8,  // SETPCAP
    10, // NET_BIND_SERVICE
    13, // NET_RAW
    18, // SYS_CHROOT
    29, // AUDIT_WRITE
    31, // SETFCAP
];

fn drop_caps() -> Result<(), String> {
    for cap in 0..64u32 {
        if KEEP_CAPS.contains(&cap) {
            continue;
        }
        let rc = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if rc != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::EINVAL) {
                break; // past the last capability this kernel knows
            }
            return Err(format!("drop capability {cap}: {err}"));
        }
    }
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        );
    }
    let mut keep: u64 = 0;
    for c in KEEP_CAPS {
        keep |= 1 << c;
    }
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let hdr = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let data = [
        Data {
            effective: keep as u32,
            permitted: keep as u32,
            inheritable: 0,
        },
        Data {
            effective: (keep >> 32) as u32,
            permitted: (keep >> 32) as u32,
            inheritable: 0,
        },
    ];
    let rc = unsafe { libc::syscall(libc::SYS_capset, &hdr as *const Header, data.as_ptr()) };
    if rc != 0 {
        return Err(format!("capset: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The syscalls refused (EPERM) inside a sandbox.
pub(crate) fn denied_syscalls() -> Vec<(&'static str, i64)> {
    let mut v: Vec<(&'static str, i64)> = vec![
        ("mount", libc::SYS_mount),
        ("umount2", libc::SYS_umount2),
        ("pivot_root", libc::SYS_pivot_root),
        ("reboot", libc::SYS_reboot),
        ("kexec_load", libc::SYS_kexec_load),
        ("kexec_file_load", libc::SYS_kexec_file_load),
        ("init_module", libc::SYS_init_module),
        ("finit_module", libc::SYS_finit_module),
        ("delete_module", libc::SYS_delete_module),
        ("bpf", libc::SYS_bpf),
        ("perf_event_open", libc::SYS_perf_event_open),
        ("keyctl", libc::SYS_keyctl),
        ("add_key", libc::SYS_add_key),
        ("request_key", libc::SYS_request_key),
        ("swapon", libc::SYS_swapon),
        ("swapoff", libc::SYS_swapoff),
        ("open_by_handle_at", libc::SYS_open_by_handle_at),
        ("name_to_handle_at", libc::SYS_name_to_handle_at),
        ("setns", libc::SYS_setns),
        ("fsopen", libc::SYS_fsopen),
        ("fsconfig", libc::SYS_fsconfig),
        ("fsmount", libc::SYS_fsmount),
        ("fspick", libc::SYS_fspick),
        ("move_mount", libc::SYS_move_mount),
        ("open_tree", libc::SYS_open_tree),
        ("mount_setattr", libc::SYS_mount_setattr),
        ("acct", libc::SYS_acct),
        ("quotactl", libc::SYS_quotactl),
        ("syslog", libc::SYS_syslog),
        ("settimeofday", libc::SYS_settimeofday),
        ("clock_settime", libc::SYS_clock_settime),
        ("clock_adjtime", libc::SYS_clock_adjtime),
        ("adjtimex", libc::SYS_adjtimex),
        ("userfaultfd", libc::SYS_userfaultfd),
        ("vhangup", libc::SYS_vhangup),
    ];
    #[cfg(target_arch = "x86_64")]
    v.extend([
        ("iopl", libc::SYS_iopl),
        ("ioperm", libc::SYS_ioperm),
        ("uselib", libc::SYS_uselib),
        ("lookup_dcookie", libc::SYS_lookup_dcookie),
    ]);
    v
}

/// Build the seccomp programs: (1) EPERM for the denied syscalls, for
/// clone/unshare asking for new namespaces, for AF_VSOCK sockets and for the
/// TIOCSTI/TIOCLINUX ioctls; (2) ENOSYS for clone3, whose flags
/// live in memory a filter cannot inspect (libc then falls back to clone).
pub(crate) fn seccomp_programs() -> Result<Vec<seccompiler::BpfProgram>, String> {
    use seccompiler::{
        SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
        SeccompRule, TargetArch,
    };
    use std::collections::BTreeMap;
    let arch =
        TargetArch::try_from(std::env::consts::ARCH).map_err(|e| format!("seccomp arch: {e}"))?;
    let ns_rules = |flags: &[u64]| -> Result<Vec<SeccompRule>, String> {
        flags
            .iter()
            .map(|&f| {
                SeccompCondition::new(0, SeccompCmpArgLen::Qword, SeccompCmpOp::MaskedEq(f), f)
                    .and_then(|c| SeccompRule::new(vec![c]))
                    .map_err(|e| e.to_string())
            })
            .collect()
    };
    let clone_ns = [
        libc::CLONE_NEWNS,
        libc::CLONE_NEWCGROUP,
        libc::CLONE_NEWUTS,
        libc::CLONE_NEWIPC,
        libc::CLONE_NEWUSER,
        libc::CLONE_NEWPID,
        libc::CLONE_NEWNET,
    ]
    .map(|f| f as u64);
    let mut unshare_ns = clone_ns.to_vec();
    unshare_ns.push(0x80); // CLONE_NEWTIME (unshare only; it is CSIGNAL space for clone)

    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, nr) in denied_syscalls() {
        rules.insert(nr, vec![]);
    }
    rules.insert(libc::SYS_clone, ns_rules(&clone_ns)?);
    rules.insert(libc::SYS_unshare, ns_rules(&unshare_ns)?);
    let eq = |arg: u8, v: u64| -> Result<SeccompRule, String> {
        SeccompCondition::new(arg, SeccompCmpArgLen::Dword, SeccompCmpOp::Eq, v)
            .and_then(|c| SeccompRule::new(vec![c]))
            .map_err(|e| e.to_string())
    };
    // vsock is not network-namespaced: it would reach the hypervisor/host.
    rules.insert(libc::SYS_socket, vec![eq(0, libc::AF_VSOCK as u64)?]);
    // Terminal input injection and console ioctls.
    rules.insert(
        libc::SYS_ioctl,
        vec![eq(1, 0x5412)?, eq(1, 0x541C)?], // TIOCSTI, TIOCLINUX
    );
    let deny = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| format!("seccomp filter: {e}"))?;
    let mut clone3 = BTreeMap::new();
    clone3.insert(libc::SYS_clone3, vec![]);
    let nosys = SeccompFilter::new(
        clone3,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        arch,
    )
    .map_err(|e| format!("seccomp filter: {e}"))?;
    let a: seccompiler::BpfProgram = deny
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    let b: seccompiler::BpfProgram = nosys
        .try_into()
        .map_err(|e: seccompiler::BackendError| e.to_string())?;
    Ok(vec![a, b])
}

/// Drop capabilities and install the seccomp filter (sets no_new_privs).
pub(super) fn drop_privileges() -> Result<(), String> {
    drop_caps()?;
    for prog in seccomp_programs()? {
        seccompiler::apply_filter(&prog).map_err(|e| format!("seccomp: {e}"))?;
    }
    Ok(())
}
