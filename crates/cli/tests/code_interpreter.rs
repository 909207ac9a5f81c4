//! The code interpreter image (`stasis-code-interpreter`, built by
//! scripts/build-code-interpreter.sh) in real sandboxes through stasis's own
//! API: its server starts with the sandbox (manifest `autostart`), runs code
//! in a Jupyter kernel reached through the port proxy (port 49999, where the
//! E2B code-interpreter SDKs call it), and the kernel's variables survive a
//! pause and a resume. Process backend fully, one microVM round.
//! Needs the image beside the guest image (STASIS_IMAGE_DIR/../code-interpreter);
//! without it the test says so and passes.

mod common;

use std::time::{Duration, Instant};

use common::{Daemon, Http};
use serde_json::{json, Value};

const PORT: u16 = 49999;

fn built() -> bool {
    let Some(img) = std::env::var_os("STASIS_IMAGE_DIR") else {
        eprintln!("code interpreter test NOT RUN: STASIS_IMAGE_DIR is not set");
        return false;
    };
    let dir = std::path::Path::new(&img).join("../code-interpreter/rootfs");
    if !dir.is_dir() {
        eprintln!(
            "code interpreter test NOT RUN: no {} (scripts/build-code-interpreter.sh)",
            dir.display()
        );
        return false;
    }
    true
}

/// Wait (bounded) until the server answers its health check.
async fn wait_ready(http: &Http, sb: &str) {
    let deadline = Instant::now() + Duration::from_secs(300);
    loop {
        let r = http
            .call(
                "GET",
                &format!("/v1/sandboxes/{sb}/ports/{PORT}/health"),
                None,
            )
            .await;
        if r.status == 200 {
            assert_eq!(r.body, json!({"status": "ok"}));
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the code interpreter never answered: {} {}",
            r.status,
            r.body
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// POST /execute; the JSON lines it streamed.
async fn execute(http: &Http, sb: &str, code: &str) -> Vec<Value> {
    let r = http
        .call(
            "POST",
            &format!("/v1/sandboxes/{sb}/ports/{PORT}/execute"),
            Some(json!({"code": code})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let text = r.body.as_str().expect("a stream of lines").to_string();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines.last(),
        Some(&json!({"type": "end_of_execution"})),
        "{text}"
    );
    lines
}

fn main_text(lines: &[Value]) -> Option<&str> {
    lines
        .iter()
        .find(|l| l["type"] == "result" && l["is_main_result"] == true)
        .and_then(|l| l["text"].as_str())
}

async fn round(http: &Http, backend: &str) {
    let sb = http
        .create(
            json!({"backend": backend, "image": "stasis-code-interpreter",
                       "autostart": true, "lifecycle": {"on_idle": "nothing"}}),
        )
        .await;
    let rec = http.state(&sb).await;
    assert_eq!(rec["manifest"]["workdir"], "/home/user", "{rec}");
    wait_ready(http, &sb).await;
    let out = execute(
        http,
        &sb,
        "import os\nanswer = 6 * 7\nprint('cwd', os.getcwd())\nanswer",
    )
    .await;
    assert_eq!(main_text(&out), Some("42"), "{out:?}");
    assert!(
        out.iter()
            .any(|l| l["type"] == "stdout" && l["text"] == "cwd /home/user\n"),
        "{out:?}"
    );
    let png = execute(
        http,
        &sb,
        "import matplotlib.pyplot as plt\nplt.plot([1, 2], [3, 4])\nplt.show()",
    )
    .await;
    assert!(
        png.iter().any(|l| l["type"] == "result"
            && l["png"]
                .as_str()
                .is_some_and(|p| p.starts_with("iVBORw0KGgo"))),
        "{png:?}"
    );

    http.ok("POST", &format!("/v1/sandboxes/{sb}/pause"), None)
        .await;
    assert_eq!(http.state(&sb).await["state"], "paused");
    http.ok("POST", &format!("/v1/sandboxes/{sb}/resume"), None)
        .await;
    // The same kernel: the variable is still there, the count goes on.
    let out = execute(http, &sb, "answer + 1").await;
    assert_eq!(main_text(&out), Some("43"), "{out:?}");
    let n = out
        .iter()
        .find(|l| l["type"] == "number_of_executions")
        .expect("an execution count");
    assert_eq!(n["execution_count"], 3, "{out:?}");
    http.ok("DELETE", &format!("/v1/sandboxes/{sb}"), None)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_code_interpreter_keeps_its_kernel_across_pause_and_resume() {
    if !built() {
        return;
    }
    let d = Daemon::start(&[]).await;
    let http = d.http();
    let listed = http.ok("GET", "/v1/images", None).await;
    assert!(
        listed.to_string().contains("stasis-code-interpreter"),
        "{listed}"
    );
    round(&http, "process").await;
    round(&http, "microvm").await;
}
