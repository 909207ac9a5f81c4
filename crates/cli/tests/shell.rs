//! `stasis shell` on a real terminal (tmux drives it: send-keys,
//! capture-pane, resize-window) against a real daemon on the process
//! backend: an interactive `python3` REPL, Ctrl-C, a window resize seen
//! inside, the shell's exit status as the CLI's, reattaching after a pause;
//! the same without a terminal on stdin; and the terminal routes' refusals
//! (bad sizes, a session without a terminal, unknown sessions, a plain GET
//! on the WebSocket route).

mod common;

use common::Daemon;
use serde_json::json;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Tmux {
    socket: String,
}

impl Tmux {
    fn new() -> Tmux {
        Tmux {
            socket: common::unique("stasis-shell"),
        }
    }

    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket])
            .args(args)
            .output()
            .expect("tmux (scripts/setup.sh installs it)");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-J", "-t", "t", "-S", "-200"])
    }

    fn wait_for(&self, needle: &str) -> String {
        let t = Instant::now();
        loop {
            let s = self.screen();
            if s.contains(needle) {
                return s;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "no {needle:?} on the screen:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn keys(&self, keys: &[&str]) {
        let mut a = vec!["send-keys", "-t", "t"];
        a.extend_from_slice(keys);
        self.run(&a);
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .output();
    }
}

fn manifest() -> serde_json::Value {
    json!({"backend": "process", "lifecycle": {"on_idle": "nothing"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_python_repl_ctrl_c_resize_pause_and_exit_code_under_tmux() {
    let d = Daemon::start(&[]).await;
    let id = d.http().create(manifest()).await;
    let tm = Tmux::new();
    let cmd = format!(
        "STASIS_DATA_DIR={} {} --url {} shell {id} -- python3 -q; echo CLI-EXIT=$?; sleep 60",
        d.dir.display(),
        common::BIN,
        d.url
    );
    tm.run(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "100",
        "-y",
        "30",
        &cmd,
    ]);
    tm.wait_for(">>> ");
    tm.keys(&["x = 6 * 7", "Enter"]);
    tm.keys(&["print('value', x)", "Enter"]);
    tm.wait_for("value 42");

    // The terminal's size, then a resize of the window seen inside.
    tm.keys(&[
        "import os; print('size', tuple(os.get_terminal_size()))",
        "Enter",
    ]);
    tm.wait_for("size (100, 30)");
    tm.run(&["resize-window", "-t", "t", "-x", "120", "-y", "40"]);
    std::thread::sleep(Duration::from_millis(500));
    tm.keys(&["print('now', tuple(os.get_terminal_size()))", "Enter"]);
    tm.wait_for("now (120, 40)");

    // Ctrl-C interrupts a long sleep in the REPL, which goes on.
    tm.keys(&["import time; time.sleep(120)", "Enter"]);
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    tm.keys(&["C-c"]);
    tm.wait_for("KeyboardInterrupt");
    assert!(t.elapsed() < Duration::from_secs(60));
    tm.keys(&["print('still', x + 1)", "Enter"]);
    tm.wait_for("still 43");
    // Arrow keys reach the line editor: Up recalls the last line.
    tm.keys(&["Up", "Enter"]);
    let t = Instant::now();
    while tm.screen().matches("still 43").count() < 2 {
        assert!(t.elapsed() < Duration::from_secs(30), "{}", tm.screen());
        std::thread::sleep(Duration::from_millis(100));
    }
    // Ctrl-D reaches the foreground program as end of input (here a `cat`
    // the REPL runs), and the REPL goes on.
    tm.keys(&["import subprocess; subprocess.run(['cat'])", "Enter"]);
    std::thread::sleep(Duration::from_millis(500));
    tm.keys(&["C-d"]);
    tm.wait_for("returncode=0");

    // A pause closes the attachment; the CLI does not reattach by itself
    // (that would resume the sandbox, and an idle open shell would never
    // stay paused) ...
    let r = d
        .http()
        .call("POST", &format!("/v1/sandboxes/{id}/pause"), None)
        .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    tm.wait_for("the sandbox paused; type to resume it");
    std::thread::sleep(Duration::from_secs(3));
    let s = d
        .http()
        .ok("GET", &format!("/v1/sandboxes/{id}"), None)
        .await;
    assert_eq!(s["state"], "paused", "an idle shell resumed its sandbox");
    // ... the first keystroke reattaches (resuming it), the keys typed go
    // through, and the same interpreter carries on.
    tm.keys(&["print('after', x * 2)", "Enter"]);
    tm.wait_for("after 84");
    // Resumed by another request, the CLI reattaches without a keystroke
    // and shows what was printed meanwhile.
    // (Armed before the pause: keys still in flight when it detaches are
    // not delivered.)
    tm.keys(&[
        "import threading; threading.Timer(4, lambda: print('late', x)).start(); print('ar' + 'med')",
        "Enter",
    ]);
    tm.wait_for("armed");
    let r = d
        .http()
        .call("POST", &format!("/v1/sandboxes/{id}/pause"), None)
        .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    let r = d
        .http()
        .call("POST", &format!("/v1/sandboxes/{id}/resume"), None)
        .await;
    assert_eq!(r.status, 200, "{:?}", r.body);
    tm.wait_for("late 42");

    // The interpreter's exit status is the CLI's.
    tm.keys(&["raise SystemExit(7)", "Enter"]);
    tm.wait_for("CLI-EXIT=7");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shell_without_a_terminal_and_refusals() {
    let d = Daemon::start(&[]).await;
    let h = d.http();
    let id = h.create(manifest()).await;

    // No terminal on stdin: lines go through, the exit status comes back.
    let mut child = Command::new(common::BIN)
        .args(["--url", &d.url, "shell", &id])
        .env_remove("STASIS_TOKEN")
        .env("STASIS_DATA_DIR", &d.dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"echo piped-$((20+1)); exit 3\n").unwrap();
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("piped-21"),
        "{out:?}"
    );

    // An unknown sandbox: one line, exit 1.
    let out = d.cli(&["shell", "sb-00000000000000000000000000000000"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("stasis: not_found:"), "{err}");

    // The REST routes' refusals.
    let base = format!("/v1/sandboxes/{id}/sessions");
    let tty = h
        .ok(
            "POST",
            &base,
            Some(json!({"argv": ["cat"], "pty": {"cols": 80, "rows": 24}})),
        )
        .await;
    assert_eq!(tty["pty"], json!({"cols": 80, "rows": 24}));
    let sid = tty["id"].as_str().unwrap();
    let piped = h.ok("POST", &base, Some(json!({"argv": ["cat"]}))).await;
    let pid = piped["id"].as_str().unwrap();
    for (body, status, code) in [
        (json!({"cols": 0, "rows": 0}), 400, "invalid_argument"),
        (json!({"cols": 80, "rows": 5000}), 400, "invalid_argument"),
        (json!({"cols": 80}), 400, "invalid_argument"),
    ] {
        let r = h
            .call("POST", &format!("{base}/{sid}/resize"), Some(body.clone()))
            .await;
        assert_eq!(r.status, status, "{body} {:?}", r.body);
        assert_eq!(r.body["error"]["code"], code, "{body}");
    }
    let ok = h
        .call(
            "POST",
            &format!("{base}/{sid}/resize"),
            Some(json!({"cols": 132, "rows": 43})),
        )
        .await;
    assert_eq!(ok.status, 204, "{:?}", ok.body);
    let r = h
        .call(
            "POST",
            &format!("{base}/{pid}/resize"),
            Some(json!({"cols": 80, "rows": 24})),
        )
        .await;
    assert_eq!(r.status, 409, "{:?}", r.body);
    assert_eq!(r.body["error"]["code"], "invalid_state");
    let r = h
        .call(
            "POST",
            &format!("{base}/sess-nope/resize"),
            Some(json!({"cols": 80, "rows": 24})),
        )
        .await;
    assert_eq!(r.status, 404, "{:?}", r.body);
    let r = h
        .call(
            "POST",
            &base,
            Some(json!({"argv": ["sh"], "pty": {"cols": 0, "rows": 24}})),
        )
        .await;
    assert_eq!(r.status, 400, "{:?}", r.body);
    // The attach route: a plain GET is not a WebSocket; unknown session 404.
    let r = h.call("GET", &format!("{base}/{sid}/attach"), None).await;
    assert_eq!(r.status, 400, "{:?}", r.body);
    assert_eq!(r.body["error"]["code"], "invalid_argument");
    let status = |e: tokio_tungstenite::tungstenite::Error| match e {
        tokio_tungstenite::tungstenite::Error::Http(r) => r.status().as_u16(),
        e => panic!("{e}"),
    };
    let ws = |path: String, token: Option<String>| {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let url = format!("{}{path}", d.url.replacen("http://", "ws://", 1));
        let mut req = url.into_client_request().unwrap();
        if let Some(t) = token {
            req.headers_mut()
                .insert("authorization", format!("Bearer {t}").parse().unwrap());
        }
        tokio_tungstenite::connect_async(req)
    };
    let e = ws(format!("{base}/sess-nope/attach"), Some(d.token()))
        .await
        .unwrap_err();
    assert_eq!(status(e), 404);
    let e = ws(format!("{base}/{sid}/attach"), None).await.unwrap_err();
    assert_eq!(status(e), 401);
    // Attached: the replay offset first, then output; a bad control
    // message is answered and the attachment goes on.
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let (mut s, _) = ws(format!("{base}/{sid}/attach?offset=0"), Some(d.token()))
        .await
        .unwrap();
    let text = |m: Option<Result<Message, _>>| match m {
        Some(Ok(Message::Text(t))) => serde_json::from_str::<serde_json::Value>(&t).unwrap(),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        text(s.next().await),
        json!({"type": "attached", "offset": 0, "pty": {"cols": 132, "rows": 43}})
    );
    s.send(Message::Text("{\"type\":\"zoom\"}".into()))
        .await
        .unwrap();
    assert_eq!(text(s.next().await)["code"], "invalid_argument");
    s.send(Message::Binary(b"hi\n".to_vec().into()))
        .await
        .unwrap();
    let mut got = Vec::new();
    while !got.ends_with(b"hi\r\n") {
        match s.next().await {
            Some(Ok(Message::Binary(b))) => got.extend_from_slice(&b),
            other => panic!("{other:?}"),
        }
    }
    // Keystroke round trip through the daemon (WebSocket in, echo out),
    // printed for the notes, not asserted.
    let mut times = Vec::new();
    for i in 0..50u8 {
        let key = b'a' + i % 26;
        let t = Instant::now();
        s.send(Message::Binary(vec![key].into())).await.unwrap();
        loop {
            match s.next().await {
                Some(Ok(Message::Binary(b))) if b.contains(&key) => break,
                Some(Ok(_)) => continue,
                other => panic!("{other:?}"),
            }
        }
        times.push(t.elapsed());
    }
    times.sort();
    eprintln!(
        "FIGURE keystroke round trip over the attach WebSocket (process backend): p50 {:?}, p90 {:?}",
        times[25], times[45]
    );
    // Killing the session ends the attachment: an exit message, then close.
    let r = h.call("DELETE", &format!("{base}/{sid}"), None).await;
    assert_eq!(r.status, 204, "{:?}", r.body);
    let mut saw_exit = false;
    loop {
        match tokio::time::timeout(Duration::from_secs(20), s.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => {
                let v: serde_json::Value = serde_json::from_str(&t).unwrap();
                saw_exit |= v["type"] == "exit";
            }
            Ok(Some(Ok(Message::Close(_)))) | Ok(None) => break,
            Ok(Some(Ok(_))) => {}
            other => panic!("{other:?}"),
        }
    }
    assert!(saw_exit, "no exit message before the close");
}
