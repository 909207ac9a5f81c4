//! A watchdog for the VM tests: a hang must fail the run, not eat CI's time.
//!
//! Each test registers itself (`watch`) and names the step it is in
//! (`Watch::step`). The first registration starts one thread; when the
//! limit (`STASIS_TEST_WATCHDOG_SECS`, default 1200 s, counted from that
//! first registration) passes with any test still registered, it writes
//! every such test and its current step (and how long it has been in it)
//! straight to fd 2, kills this process's children (the jails' inits, and
//! with them their QEMUs; unjailed QEMUs; helpers) and aborts the process. A test leaves the register
//! when its `Watch` is dropped (on success and on panic alike).

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

static STEPS: Mutex<BTreeMap<&'static str, (String, Instant)>> = Mutex::new(BTreeMap::new());
static STARTED: OnceLock<()> = OnceLock::new();

fn limit() -> Duration {
    let secs = std::env::var("STASIS_TEST_WATCHDOG_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1200);
    Duration::from_secs(secs)
}

/// Straight to fd 2: libtest's capture would swallow eprintln!.
fn say(msg: &str) {
    unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
}

fn start() {
    STARTED.get_or_init(|| {
        let limit = limit();
        std::thread::Builder::new()
            .name("vm-test-watchdog".into())
            .spawn(move || {
                let t0 = Instant::now();
                loop {
                    std::thread::sleep(Duration::from_secs(1));
                    if t0.elapsed() < limit {
                        continue;
                    }
                    let steps = match STEPS.lock() {
                        Ok(s) => s.clone(),
                        Err(p) => p.into_inner().clone(),
                    };
                    if steps.is_empty() {
                        continue;
                    }
                    let mut msg = format!(
                        "\nWATCHDOG: VM tests still running after {} s; aborting\n",
                        limit.as_secs()
                    );
                    for (test, (step, since)) in &steps {
                        msg.push_str(&format!(
                            "WATCHDOG: {test}: in step {step:?} for {} s\n",
                            since.elapsed().as_secs()
                        ));
                    }
                    say(&msg);
                    kill_children();
                    std::process::abort();
                }
            })
            .expect("watchdog thread");
    });
}

/// SIGKILL every direct child of this process (a jail's init is pid 1 of
/// its namespace: its QEMU dies with it).
fn kill_children() {
    let me = std::process::id().to_string();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in dir.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the ")" closing the command name: state, ppid, ...
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1));
        if ppid == Some(me.as_str()) {
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

/// A test under the watchdog (registered until dropped).
pub struct Watch(&'static str);

/// Register `test` (in step "start") and make sure the watchdog runs.
pub fn watch(test: &'static str) -> Watch {
    start();
    let w = Watch(test);
    w.step("start");
    w
}

impl Watch {
    /// The step the test is in now (what the watchdog prints on a hang).
    pub fn step(&self, what: &str) {
        let mut s = STEPS.lock().unwrap_or_else(|p| p.into_inner());
        s.insert(self.0, (what.to_string(), Instant::now()));
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let mut s = STEPS.lock().unwrap_or_else(|p| p.into_inner());
        s.remove(self.0);
    }
}
