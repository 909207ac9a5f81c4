//! Boot a sandbox from an image dir and run shell commands in it, printing
//! timings: `cargo run --example mvm-shell -- <image-dir> 'cmd' ['cmd' ...]`.
//! A command `@pause` pauses and resumes the sandbox (printing the figures),
//! `@sleep N` sleeps N seconds on the host.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use stasis_backend::{Backend, SandboxSpec};
use stasis_backend_microvm::{AccelChoice, MicrovmBackend, MicrovmConfig};
use stasis_core::{ExecRequest, Manifest, SandboxId};

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let img = PathBuf::from(args.next().expect("image dir"));
    let mut c = MicrovmConfig::new(img.parent().unwrap());
    c.accel = AccelChoice::Tcg;
    let b = MicrovmBackend::new(c);
    let root = tempfile::tempdir().unwrap();
    let id = SandboxId::generate();
    let spec = SandboxSpec {
        id: id.clone(),
        manifest: Manifest {
            image: Some(img.display().to_string()),
            ..Default::default()
        },
        dir: root.path().join(id.as_str()),
    };
    let t = Instant::now();
    b.create(&spec).await.expect("create");
    println!("# created in {} ms", t.elapsed().as_millis());
    let mut n = 0;
    for cmd in args {
        if let Some(s) = cmd.strip_prefix("@sleep ") {
            tokio::time::sleep(Duration::from_secs_f64(s.parse().unwrap())).await;
            continue;
        }
        if cmd == "@snap" {
            n += 1;
            let out = root.path().join(format!("snap{n}"));
            std::fs::create_dir_all(&out).unwrap();
            let t = Instant::now();
            let arts = b.snapshot(&id, &out).await.expect("snapshot");
            println!(
                "# snapshot {} in {} ms: {arts:?}",
                out.display(),
                t.elapsed().as_millis()
            );
            continue;
        }
        if let Some(s) = cmd.strip_prefix("@keep ") {
            // copy the artifact dirs somewhere before the temp dir goes away
            let to = PathBuf::from(s);
            std::fs::create_dir_all(&to).unwrap();
            for e in std::fs::read_dir(root.path()).unwrap().flatten() {
                if e.file_name().to_string_lossy().starts_with("snap") {
                    let d = to.join(e.file_name());
                    std::fs::create_dir_all(&d).unwrap();
                    for f in std::fs::read_dir(e.path()).unwrap().flatten() {
                        std::fs::copy(f.path(), d.join(f.file_name())).unwrap();
                    }
                }
            }
            continue;
        }
        if cmd == "@pause" {
            n += 1;
            let out = root.path().join(format!("pause{n}"));
            std::fs::create_dir_all(&out).unwrap();
            let t = Instant::now();
            let arts = b.pause(&id, &out, true).await.expect("pause");
            println!("# paused in {} ms: {arts:?}", t.elapsed().as_millis());
            let t = Instant::now();
            b.resume(&spec, &out).await.expect("resume");
            println!("# resumed in {} ms", t.elapsed().as_millis());
            continue;
        }
        let t = Instant::now();
        let r = b
            .exec(
                &id,
                ExecRequest {
                    argv: vec!["sh".into(), "-c".into(), cmd.clone()],
                    env: Default::default(),
                    cwd: None,
                    timeout_ms: 60_000,
                    stdin: None,
                    user: None,
                },
                None,
            )
            .await;
        match r {
            Ok(r) => {
                print!("{}", String::from_utf8_lossy(&r.stdout));
                eprint!("{}", String::from_utf8_lossy(&r.stderr));
                println!(
                    "# {cmd:?}: exit {:?} in {} ms",
                    r.exit_code,
                    t.elapsed().as_millis()
                );
            }
            Err(e) => println!("# {cmd:?}: {e}"),
        }
    }
    b.destroy(&id, &spec.dir).await.unwrap();
}
