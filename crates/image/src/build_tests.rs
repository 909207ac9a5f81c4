use super::*;
use crate::layer::tests::{file, tar_bytes};
use std::fs;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// A runner that understands a few shell commands, writing into `upper`:
/// `write PATH TEXT`, `dump PATH` (env, workdir, user, and whether the
/// root has /etc/base), `fail`.
#[derive(Default)]
struct Fake {
    runs: AtomicUsize,
    seen: Mutex<Vec<String>>,
}

impl StepRunner for Fake {
    fn run(&self, s: &RunStep<'_>) -> Result<RunOutcome> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        // Expand variables from the step's environment, as the shell would.
        let vars: HashMap<String, String> = s
            .env
            .iter()
            .filter_map(|e| e.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let raw = s.argv.last().cloned().unwrap_or_default();
        let cmd = dockerfile::expand(&raw, &|k| vars.get(k).cloned()).unwrap();
        self.seen.lock().unwrap().push(cmd.clone());
        let words: Vec<&str> = cmd.splitn(3, ' ').collect();
        let put = |path: &str, data: &[u8]| {
            let p = s.upper.join(path.trim_start_matches('/'));
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, data).unwrap();
        };
        match words.as_slice() {
            ["write", path, text] => put(path, text.as_bytes()),
            ["dump", path] => {
                let base = fs::read_to_string(s.root.join("etc/base")).unwrap_or_default();
                let copied = s.root.join("app/src/main.py").is_file();
                put(
                    path,
                    format!(
                        "env={:?}\nworkdir={}\nuser={}\nbase={base}\ncopied={copied}\n",
                        s.env, s.workdir, s.user
                    )
                    .as_bytes(),
                )
            }
            ["fail"] => {
                return Ok(RunOutcome {
                    exit_code: 3,
                    output: "step output\nsomething broke".into(),
                })
            }
            _ => panic!("fake runner: unknown command {cmd:?}"),
        }
        Ok(RunOutcome {
            exit_code: 0,
            output: format!("ran {cmd}"),
        })
    }
}

struct Env {
    _tmp: tempfile::TempDir,
    store: ImageStore,
    ctx: PathBuf,
}

fn env() -> Env {
    let tmp = tempfile::tempdir().unwrap();
    let store = ImageStore::open(&tmp.path().join("store")).unwrap();
    // A public base with /etc/base.
    let l = tmp.path().join("base.tar");
    fs::write(&l, tar_bytes(&[file("etc/base", b"bookworm")])).unwrap();
    let l = store.put_layer(&l).unwrap();
    store
        .commit(
            &Owner::Public,
            "base",
            "latest",
            None,
            vec![l],
            ImageConfig::default(),
            vec![],
            &ApplyOptions::default(),
        )
        .unwrap();
    let ctx = tmp.path().join("ctx");
    fs::create_dir_all(ctx.join("src")).unwrap();
    fs::write(ctx.join("src/main.py"), b"print('hi')\n").unwrap();
    fs::write(ctx.join("README"), b"readme").unwrap();
    Env {
        _tmp: tmp,
        store,
        ctx,
    }
}

const DF: &str = "FROM base\n\
                  ARG VERSION=1\n\
                  ENV APP_HOME=/app GREETING=hello\n\
                  WORKDIR $APP_HOME\n\
                  COPY src/ src/\n\
                  COPY README /docs/\n\
                  RUN write /app/version v$VERSION\n\
                  USER 1000\n\
                  RUN dump /app/dump.txt\n\
                  CMD [\"python3\", \"src/main.py\"]\n";

fn do_build(
    e: &Env,
    df: &str,
    runner: &dyn StepRunner,
    events: &mut Vec<BuildEvent>,
) -> Result<BuildResult> {
    build(
        &e.store,
        &BuildRequest {
            owner: Owner::Tenant("t1".into()),
            reference: "app:v1",
            dockerfile: df,
            context: &e.ctx,
            build_args: HashMap::new(),
            opts: ApplyOptions::default(),
        },
        runner,
        &mut |ev| events.push(ev),
    )
}

#[test]
fn builds_run_copy_env_workdir_user_and_records_the_config() {
    let e = env();
    let fake = Fake::default();
    let mut events = vec![];
    let r = do_build(&e, DF, &fake, &mut events).unwrap();
    let root = &r.image.rootfs;
    assert_eq!(fs::read(root.join("etc/base")).unwrap(), b"bookworm");
    assert_eq!(
        fs::read(root.join("app/src/main.py")).unwrap(),
        b"print('hi')\n"
    );
    assert_eq!(fs::read(root.join("docs/README")).unwrap(), b"readme");
    assert_eq!(fs::read(root.join("app/version")).unwrap(), b"v1");
    let dump = fs::read_to_string(root.join("app/dump.txt")).unwrap();
    assert!(
        dump.contains("APP_HOME=/app") && dump.contains("VERSION=1"),
        "{dump}"
    );
    assert!(
        dump.contains("workdir=/app\n") && dump.contains("user=1000\n"),
        "{dump}"
    );
    assert!(
        dump.contains("base=bookworm") && dump.contains("copied=true"),
        "{dump}"
    );
    let c = &r.image.record.config;
    assert_eq!(c.working_dir, "/app");
    assert_eq!(c.user, "1000");
    assert_eq!(c.get_env("GREETING").as_deref(), Some("hello"));
    assert_eq!(c.default_command(), vec!["python3", "src/main.py"]);
    assert_eq!(r.cache_hits, 0);
    assert_eq!(fake.runs.load(Ordering::SeqCst), 2);
    assert!(!r.image.record.build_log.is_empty());
    assert!(events
        .iter()
        .any(|e| matches!(e, BuildEvent::Output { text, .. } if text.contains("ran write"))));
    assert!(matches!(
        events.last(),
        Some(BuildEvent::Done {
            steps: 10,
            cache_hits: 0,
            ..
        })
    ));
    // Temp dirs of the build are gone.
    assert_eq!(fs::read_dir(e.store.root().join("tmp")).unwrap().count(), 0);
}

#[test]
fn an_unchanged_rebuild_is_all_hits_and_a_changed_step_rebuilds_from_there() {
    let e = env();
    let fake = Fake::default();
    let first = do_build(&e, DF, &fake, &mut vec![]).unwrap();
    let again = do_build(&e, DF, &fake, &mut vec![]).unwrap();
    assert_eq!(again.cache_hits, 9, "every step after FROM");
    assert_eq!(fake.runs.load(Ordering::SeqCst), 2, "no RUN re-executed");
    assert_eq!(again.image.record.id, first.image.record.id);

    // Change a copied file: the COPY and every later layer step rebuild.
    fs::write(e.ctx.join("README"), b"readme v2").unwrap();
    let mut events = vec![];
    let third = do_build(&e, DF, &fake, &mut events).unwrap();
    assert_eq!(third.cache_hits, 4, "ARG, ENV, WORKDIR, first COPY");
    assert_eq!(fake.runs.load(Ordering::SeqCst), 4);
    assert_eq!(
        fs::read(third.image.rootfs.join("docs/README")).unwrap(),
        b"readme v2"
    );
    let cached: Vec<usize> = events
        .iter()
        .filter_map(|e| match e {
            BuildEvent::Cached { index } => Some(*index),
            _ => None,
        })
        .collect();
    assert_eq!(cached, vec![2, 3, 4, 5]);

    // Change a RUN line: hits up to it.
    let df = DF.replace(
        "write /app/version v$VERSION",
        "write /app/version w$VERSION",
    );
    let fourth = do_build(&e, &df, &fake, &mut vec![]).unwrap();
    assert_eq!(fourth.cache_hits, 5);
    assert_eq!(
        fs::read(fourth.image.rootfs.join("app/version")).unwrap(),
        b"w1"
    );
}

#[test]
fn a_failing_run_shows_output_and_code_and_keeps_earlier_steps_cached() {
    let e = env();
    let fake = Fake::default();
    let df = "FROM base\nRUN write /a 1\nRUN fail\nRUN write /b 2\n";
    let err = do_build(&e, df, &fake, &mut vec![]).unwrap_err();
    assert!(err.message.contains("line 3"), "{}", err.message);
    assert!(
        err.message.contains("exited with code 3"),
        "{}",
        err.message
    );
    // Its own code, and the output as it was: line breaks kept.
    assert_eq!(err.code, ErrorCode::BuildFailed);
    assert!(
        err.message.contains("\nstep output\nsomething broke"),
        "{}",
        err.message
    );
    assert!(e
        .store
        .resolve(&Owner::Tenant("t1".into()), "app:v1")
        .is_err());
    assert_eq!(fs::read_dir(e.store.root().join("tmp")).unwrap().count(), 0);
    let fixed = "FROM base\nRUN write /a 1\nRUN write /c 3\nRUN write /b 2\n";
    let r = do_build(&e, fixed, &fake, &mut vec![]).unwrap();
    assert_eq!(r.cache_hits, 1, "the step before the failure was cached");
}

#[test]
fn copy_cannot_leave_the_context() {
    let e = env();
    let fake = Fake::default();
    std::os::unix::fs::symlink("/etc", e.ctx.join("hostetc")).unwrap();
    for (df, needle) in [
        ("FROM base\nCOPY ../secret /x\n", "leaves the build context"),
        (
            "FROM base\nCOPY hostetc/hostname /x\n",
            "leaves the build context",
        ),
        ("FROM base\nCOPY missing /x\n", "not in the build context"),
        ("FROM base\nCOPY --chown=app src /x\n", "numeric"),
    ] {
        let err = do_build(&e, df, &fake, &mut vec![]).unwrap_err();
        assert!(err.message.contains(needle), "{df}: {}", err.message);
        assert!(err.message.contains("line 2"), "{}", err.message);
    }
}

#[test]
fn from_an_unknown_or_foreign_image_is_not_found() {
    let e = env();
    let fake = Fake::default();
    let err = do_build(&e, "FROM nosuch\nRUN write /a 1\n", &fake, &mut vec![]).unwrap_err();
    assert_eq!(
        err.code,
        stasis_core::ErrorCode::NotFound,
        "{}",
        err.message
    );
    // Another tenant's image.
    do_build(&e, "FROM base\nRUN write /a 1\n", &fake, &mut vec![]).unwrap();
    let other = build(
        &e.store,
        &BuildRequest {
            owner: Owner::Tenant("t2".into()),
            reference: "x",
            dockerfile: "FROM app:v1\n",
            context: &e.ctx,
            build_args: HashMap::new(),
            opts: ApplyOptions::default(),
        },
        &fake,
        &mut |_| {},
    )
    .unwrap_err();
    assert_eq!(other.code, stasis_core::ErrorCode::NotFound);
    // FROM scratch works.
    let r = do_build(&e, "FROM scratch\nCOPY README /\n", &fake, &mut vec![]).unwrap();
    assert!(r.image.rootfs.join("README").is_file());
}

#[test]
fn concurrent_builds_of_one_image_do_not_corrupt_the_cache() {
    let e = Arc::new(env());
    let fake = Arc::new(Fake::default());
    let handles: Vec<_> = (0..3)
        .map(|_| {
            let (e, fake) = (e.clone(), fake.clone());
            std::thread::spawn(move || {
                do_build(&e, DF, fake.as_ref(), &mut vec![]).map(|r| r.image.record.id)
            })
        })
        .collect();
    let ids: Vec<_> = handles
        .into_iter()
        .map(|h| h.join().unwrap().unwrap())
        .collect();
    let again = do_build(&e, DF, fake.as_ref(), &mut vec![]).unwrap();
    assert_eq!(again.cache_hits, 9);
    assert!(ids.contains(&again.image.record.id));
    assert_eq!(
        fs::read(again.image.rootfs.join("app/version")).unwrap(),
        b"v1"
    );
    assert_eq!(fs::read_dir(e.store.root().join("tmp")).unwrap().count(), 0);
}

#[test]
fn build_args_override_defaults() {
    let e = env();
    let fake = Fake::default();
    let r = build(
        &e.store,
        &BuildRequest {
            owner: Owner::Tenant("t1".into()),
            reference: "app:v2",
            dockerfile: DF,
            context: &e.ctx,
            build_args: [("VERSION".to_string(), "9".to_string())].into(),
            opts: ApplyOptions::default(),
        },
        &fake,
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(fs::read(r.image.rootfs.join("app/version")).unwrap(), b"v9");
}

/// A runner whose steps all fail, with a hint (as the daemon's says when the
/// build has no egress).
struct Hinted(Fake);

impl StepRunner for Hinted {
    fn run(&self, s: &RunStep<'_>) -> Result<RunOutcome> {
        self.0.run(s)
    }
    fn failure_hint(&self) -> Option<String> {
        Some("network egress is closed".into())
    }
}

#[test]
fn a_failed_step_carries_the_runners_hint_on_its_first_line() {
    let e = env();
    let err = do_build(
        &e,
        "FROM base\nRUN fail\n",
        &Hinted(Fake::default()),
        &mut vec![],
    )
    .map(|_| ())
    .unwrap_err();
    let first = err.message.lines().next().unwrap();
    assert!(
        first.contains("exited with code 3; network egress is closed"),
        "{first}"
    );
}

#[test]
fn output_tail_keeps_the_last_lines_and_bytes() {
    let out: String = (1..=100).map(|i| format!("line {i}\n")).collect();
    let t = output_tail(&out, 3, 1000);
    assert_eq!(t, "line 98\nline 99\nline 100");
    assert_eq!(output_tail("a\nb", 5, 1000), "a\nb");
    assert_eq!(output_tail(&out, 100, 8), "line 100");
    // A cut never splits a character.
    assert_eq!(output_tail("ééé", 1, 3), "é");
    assert_eq!(output_tail("", 5, 5), "");
}
