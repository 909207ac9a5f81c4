//! Boots the real guest image under QEMU (TCG, exactly the host backend's
//! command line), talks to the agent over the virtio-serial chardev socket,
//! and proves pause/resume: QMP stop + migrate to a file + quit, a new QEMU
//! with -incoming, cont, reconnect; sessions, variables, counters, files and
//! boot_id all survive.
//!
//! Runs only when STASIS_IMAGE_DIR points at a built image
//! (scripts/build-guest-image.sh); with the variable set, any problem fails
//! the test. STASIS_TSC_KHZ overrides the host TSC rate read from /proc/cpuinfo.

mod common;

use common::Client;
use stasis_agent_proto::{Reply, Request};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The guest's TSC rate under TCG is the host's; the kernel needs it given
/// (see scripts/build-guest-image.sh).
fn host_tsc_khz() -> u64 {
    if let Some(v) = std::env::var("STASIS_TSC_KHZ")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        return v;
    }
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").expect("/proc/cpuinfo");
    let mhz: f64 = cpuinfo
        .lines()
        .find(|l| l.starts_with("cpu MHz"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.trim().parse().ok())
        .expect("cpu MHz in /proc/cpuinfo");
    (mhz * 1000.0).round() as u64
}

struct Vm {
    child: Child,
    dir: PathBuf,
}

impl Drop for Vm {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_qemu(image: &Path, dir: &Path, incoming: Option<&str>) -> Vm {
    for s in ["agent.sock", "qmp.sock"] {
        let _ = std::fs::remove_file(dir.join(s));
    }
    // The image's recommended command line, plus the host's TSC rate.
    let base = std::fs::read(image.join("image.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v["kernel_cmdline"].as_str().map(str::to_string))
        .unwrap_or_else(|| "console=ttyS0 reboot=t panic=-1 quiet tsc=reliable".into());
    let append = format!("{base} tsc_early_khz={}", host_tsc_khz());
    let mut cmd = Command::new("qemu-system-x86_64");
    cmd.current_dir(dir).args([
        "-M",
        "microvm,x-option-roms=off,isa-serial=on,rtc=on",
        // qboot boots -kernel directly (QEMU 8+ defaults microvm to SeaBIOS).
        "-bios",
        "qboot.rom",
        "-accel",
        "tcg",
        "-cpu",
        "max",
        "-m",
        "256",
        "-smp",
        "1",
        "-nodefaults",
        "-no-user-config",
        "-nographic",
        "-no-reboot",
        "-kernel",
    ]);
    cmd.arg(image.join("vmlinux"))
        .arg("-initrd")
        .arg(image.join("initrd.img"))
        .args(["-append", &append])
        .args([
            "-serial",
            "file:console.log",
            "-drive",
            "id=root,file=disk.qcow2,format=qcow2,if=none",
            "-device",
            "virtio-blk-device,drive=root",
            "-device",
            "virtio-serial-device",
            "-chardev",
            "socket,id=agent,path=agent.sock,server=on,wait=off",
            "-device",
            "virtserialport,chardev=agent,name=org.stasis.agent.0",
            "-qmp",
            "unix:qmp.sock,server=on,wait=off",
        ]);
    if let Some(i) = incoming {
        cmd.args(["-incoming", i]);
    }
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("qemu.log"))
        .unwrap();
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    let child = cmd.spawn().expect("spawn qemu-system-x86_64");
    Vm {
        child,
        dir: dir.to_path_buf(),
    }
}

fn wait_connect(path: &Path, timeout: Duration) -> UnixStream {
    let deadline = Instant::now() + timeout;
    loop {
        match UnixStream::connect(path) {
            Ok(s) => return s,
            Err(e) if Instant::now() > deadline => panic!("connect {}: {e}", path.display()),
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

struct Qmp {
    r: BufReader<UnixStream>,
    w: UnixStream,
}

impl Qmp {
    fn connect(vm: &Vm) -> Qmp {
        let s = wait_connect(&vm.dir.join("qmp.sock"), Duration::from_secs(30));
        s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
        let mut q = Qmp {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        };
        q.line(); // greeting
        q.cmd("qmp_capabilities", serde_json::json!({}));
        q
    }
    fn line(&mut self) -> serde_json::Value {
        let mut l = String::new();
        self.r.read_line(&mut l).expect("qmp read");
        assert!(!l.is_empty(), "qmp closed");
        serde_json::from_str(&l).expect("qmp json")
    }
    fn cmd(&mut self, execute: &str, arguments: serde_json::Value) -> serde_json::Value {
        let msg = serde_json::json!({"execute": execute, "arguments": arguments});
        writeln!(self.w, "{msg}").unwrap();
        loop {
            let v = self.line();
            if v.get("event").is_some() {
                continue;
            }
            if let Some(e) = v.get("error") {
                panic!("qmp {execute}: {e}");
            }
            return v["return"].clone();
        }
    }
}

fn agent(vm: &Vm, first_id: u64) -> Client<UnixStream> {
    let s = wait_connect(&vm.dir.join("agent.sock"), Duration::from_secs(30));
    s.set_read_timeout(Some(Duration::from_secs(180))).unwrap();
    Client::new(s).start_id(first_id)
}

fn hello(c: &mut Client<UnixStream>) -> String {
    match c.reply(Request::Hello) {
        Reply::Hello { boot_id, .. } => boot_id,
        r => panic!("hello: {r:?}"),
    }
}

/// Stop, save device state + RAM to `state`, quit: the VM is gone.
fn pause(vm: Vm) -> (Duration, u64) {
    let t = Instant::now();
    let mut q = Qmp::connect(&vm);
    q.cmd("stop", serde_json::json!({}));
    q.cmd("migrate", serde_json::json!({"uri": "exec:cat > state"}));
    loop {
        let st = q.cmd("query-migrate", serde_json::json!({}));
        match st["status"].as_str() {
            Some("completed") => break,
            Some("failed") | Some("cancelled") => panic!("migration {st}"),
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    }
    let took = t.elapsed();
    let _ = writeln!(q.w, "{}", serde_json::json!({"execute": "quit"}));
    let mut vm = vm;
    let deadline = Instant::now() + Duration::from_secs(20);
    while vm.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "qemu did not quit");
        std::thread::sleep(Duration::from_millis(10));
    }
    let size = std::fs::metadata(vm.dir.join("state")).unwrap().len();
    (took, size)
}

fn resume(image: &Path, dir: &Path) -> Vm {
    let vm = start_qemu(image, dir, Some("exec:cat state"));
    let mut q = Qmp::connect(&vm);
    loop {
        let st = q.cmd("query-status", serde_json::json!({}));
        match st["status"].as_str() {
            Some("inmigrate") => std::thread::sleep(Duration::from_millis(10)),
            Some("paused") | Some("postmigrate") | Some("prelaunch") => break,
            _ => panic!("unexpected status after -incoming: {st}"),
        }
    }
    q.cmd("cont", serde_json::json!({}));
    vm
}

fn last_tick(text: &str) -> u64 {
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix("tick ")?.trim().parse().ok())
        .unwrap_or(0)
}

#[test]
fn boot_exec_session_pause_resume() {
    let Some(image) = std::env::var_os("STASIS_IMAGE_DIR").map(PathBuf::from) else {
        eprintln!("skipped: set STASIS_IMAGE_DIR to a built guest image to run the VM test");
        return;
    };
    for f in ["vmlinux", "initrd.img", "rootfs.qcow2"] {
        assert!(
            image.join(f).exists(),
            "{} missing",
            image.join(f).display()
        );
    }
    let image = image.canonicalize().unwrap();
    let dir = std::env::temp_dir().join(format!("stasis-vm-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let st = Command::new("qemu-img")
        .args(["create", "-q", "-f", "qcow2", "-F", "qcow2", "-b"])
        .arg(image.join("rootfs.qcow2"))
        .arg(dir.join("disk.qcow2"))
        .status()
        .expect("qemu-img");
    assert!(st.success());

    // Cold boot.
    let t0 = Instant::now();
    let vm = start_qemu(&image, &dir, None);
    let mut c = agent(&vm, 1);
    let boot_id = hello(&mut c);
    eprintln!("cold boot: agent Hello after {:?}", t0.elapsed());

    let t = Instant::now();
    let r = c.exec(&["python3", "-c", "print(6*7)"], 60_000);
    assert_eq!(r.exit_code, Some(0), "{r:?}");
    assert_eq!(String::from_utf8_lossy(&r.stdout), "42\n");
    eprintln!("python3 -c: {:?}", t.elapsed());

    let py = c.session_start(&["python3", "-i", "-u"]);
    c.session_write(&py, "x = 6*7\nprint('x =', x)\n");
    let (_, mut py_off) = c.session_read_until(&py, 0, "x = 42", Duration::from_secs(60));
    let counter = c.session_start(&[
        "sh",
        "-c",
        "i=0; while :; do i=$((i+1)); echo tick $i; sleep 0.2; done",
    ]);
    let (text, mut ctr_off) = c.session_read_until(&counter, 0, "tick 3", Duration::from_secs(60));
    let mut before = last_tick(&text);
    let file = "/root/pause-test.txt";
    let mut expect_file = String::new();
    drop(c);

    let mut vm = vm;
    for cycle in 1..=2 {
        let mut c = agent(&vm, cycle * 1000);
        let line = format!("cycle {cycle}\n");
        assert_eq!(
            c.reply(Request::WriteFile {
                path: file.into(),
                data: line.clone().into_bytes(),
                append: true,
                mode: None,
                offset: None,
            }),
            Reply::Ok
        );
        expect_file.push_str(&line);
        assert_eq!(c.reply(Request::Sync), Reply::Ok);
        if cycle == 2 {
            // Pause with a request in flight: its reply is produced after the
            // resume and must not confuse the next connection.
            stasis_agent_proto::write_frame(
                &mut c.stream,
                &stasis_agent_proto::Frame {
                    id: 424242,
                    body: stasis_agent_proto::Body::Request(Request::SessionRead {
                        session: counter.clone(),
                        offset: u64::MAX,
                        wait_ms: 3000,
                    }),
                },
            )
            .unwrap();
        }
        drop(c);

        let (took, size) = pause(vm);
        eprintln!("cycle {cycle}: pause (stop+migrate) {took:?}, state {size} bytes");
        std::thread::sleep(Duration::from_secs(2));

        let t = Instant::now();
        vm = resume(&image, &dir);
        let mut c = agent(&vm, cycle * 1000 + 500);
        assert_eq!(
            hello(&mut c),
            boot_id,
            "boot_id changed: the guest rebooted"
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        assert_eq!(c.reply(Request::SetTime { unix_nanos: now }), Reply::Ok);
        eprintln!("cycle {cycle}: resume to agent Hello {:?}", t.elapsed());

        // The interpreter kept its variable.
        c.session_write(&py, "x += 1\nprint('now', x)\n");
        let want = format!("now {}", 42 + cycle);
        let (_, o) = c.session_read_until(&py, py_off, &want, Duration::from_secs(60));
        py_off = o;
        eprintln!(
            "cycle {cycle}: session answered {:?} after start",
            t.elapsed()
        );

        // The counter continued (it did not restart from 1).
        let (text, o) = c.session_read_until(&counter, ctr_off, "tick", Duration::from_secs(30));
        ctr_off = o;
        let first_after = text
            .lines()
            .find_map(|l| l.strip_prefix("tick ")?.trim().parse::<u64>().ok())
            .unwrap();
        assert!(
            first_after > before,
            "counter restarted: {first_after} after {before}"
        );
        before = last_tick(&text);

        // Files on disk survived.
        match c.reply(Request::ReadFile {
            path: file.into(),
            offset: 0,
            limit: 1 << 20,
        }) {
            Reply::File { data, .. } => assert_eq!(String::from_utf8_lossy(&data), expect_file),
            r => panic!("read file: {r:?}"),
        }
        // Guest clock follows the host's after SetTime.
        let r = c.exec(&["date", "+%s"], 10_000);
        let guest: u64 = String::from_utf8_lossy(&r.stdout).trim().parse().unwrap();
        let host = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(guest.abs_diff(host) <= 2, "guest {guest} host {host}");
        if cycle == 2 {
            // A restored copy is made unique.
            let mid = "0123456789abcdef0123456789abcdef";
            assert_eq!(
                c.reply(Request::SetIdentity {
                    hostname: "fork-2".into(),
                    machine_id: mid.into(),
                    entropy: vec![0x5a; 64],
                }),
                Reply::Ok
            );
            let r = c.exec(
                &["sh", "-c", "hostname; cat /etc/machine-id /etc/hostname"],
                10_000,
            );
            assert_eq!(
                String::from_utf8_lossy(&r.stdout),
                format!("fork-2\n{mid}\nfork-2\n")
            );
        }
        // Sessions are listed with the same ids.
        match c.reply(Request::SessionList) {
            Reply::Sessions { sessions } => {
                let ids: Vec<_> = sessions.iter().map(|s| s.id.as_str()).collect();
                assert!(ids.contains(&py.as_str()) && ids.contains(&counter.as_str()));
            }
            r => panic!("{r:?}"),
        }
    }
    drop(vm);
    let _ = std::fs::remove_dir_all(&dir);
}
