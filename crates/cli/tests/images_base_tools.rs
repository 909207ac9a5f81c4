//! The stasis base ships what a newcomer's first Dockerfile lines expect:
//! `pip install` into the system Python (PEP 668's externally-managed
//! refusal lifted by the base's /etc/pip.conf), `python3 -m venv` with pip
//! inside, and git. Built FROM the base and run on the process backend.
//! Needs the guest image (STASIS_IMAGE_DIR, which leaves the stasis base
//! beside it); the step that installs from PyPI needs the Internet
//! (`STASIS_TEST_PYPI=1`, the build allowing PyPI's two names only).

mod common;

use common::Daemon;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pip_venv_and_git_work_from_the_stasis_base() {
    let Some(img) = std::env::var_os("STASIS_IMAGE_DIR") else {
        eprintln!("stasis base tools test NOT RUN: STASIS_IMAGE_DIR is not set");
        return;
    };
    assert!(
        std::path::Path::new(&img).join("base-rootfs").is_dir(),
        "the guest image build leaves base-rootfs beside the image; rebuild it (scripts/setup.sh)"
    );
    let pypi = std::env::var("STASIS_TEST_PYPI").as_deref() == Ok("1");
    let d = Daemon::start(&[]).await;
    let http = d.http();
    let ctx = tempfile::tempdir().unwrap();
    // Offline steps: pip's own wheels, venv's bundled pip, git.
    let mut dockerfile = String::from(
        "FROM stasis-base:bookworm\n\
         RUN git --version > /git.txt\n\
         RUN python3 -m venv /v && /v/bin/pip --version > /venv-pip.txt\n\
         RUN pip config list > /pip-config.txt\n",
    );
    if pypi {
        // A newcomer's first line, verbatim: no --break-system-packages.
        dockerfile.push_str("RUN pip install six==1.17.0\n");
    } else {
        eprintln!("the pip-from-PyPI step NOT RUN: set STASIS_TEST_PYPI=1 (reaches pypi.org)");
    }
    std::fs::write(ctx.path().join("Dockerfile"), dockerfile).unwrap();
    let c = ctx.path().display().to_string();
    let mut args = vec!["image", "build", "-t", "tools:1"];
    if pypi {
        args.extend([
            "--network-allow",
            "pypi.org",
            "--network-allow",
            "files.pythonhosted.org",
        ]);
    }
    args.push(&c);
    let o = d.cli(&args);
    assert!(o.status.success(), "{o:?}");

    let sb = http
        .create(json!({"backend": "process", "image": "tools:1",
                       "lifecycle": {"on_idle": "nothing"}}))
        .await;
    let out = http
        .sh(&sb, "cat /git.txt /venv-pip.txt /pip-config.txt")
        .await;
    assert!(out.starts_with("git version 2."), "{out}");
    assert!(
        out.contains("(python 3."),
        "the venv has its own pip: {out}"
    );
    assert!(out.contains("/v/lib/python3"), "{out}");
    assert!(out.contains("global.break-system-packages='true'"), "{out}");
    if pypi {
        let v = http
            .sh(
                &sb,
                "python3 -c 'import six; print(six.__version__, six.__file__)'",
            )
            .await;
        assert!(v.starts_with("1.17.0 /usr/local/lib/python3"), "{v}");
    }
    http.ok("DELETE", &format!("/v1/sandboxes/{sb}"), None)
        .await;
}
