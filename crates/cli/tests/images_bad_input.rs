//! Bad input to images through the real daemon: the layer limit is a daemon
//! setting (`--max-layer-mb`) that bounds an imported layer, a build
//! context and an archive a Dockerfile ADDs (413, nothing left); a
//! malicious build context or ADDed archive is refused with the line and
//! the entry named; an ADD of a URL says why not; concurrent builds of one
//! image through the daemon agree and leave one cache.

mod common;

use std::io::Write;

use common::archives::{f, import_busybox, l, oci_archive, tar_of};
use common::{Daemon, Http};
use serde_json::Value;

/// POST a build context tar; the NDJSON events the daemon streamed back.
async fn build_raw(http: &Http, tag: &str, context: Vec<u8>) -> Vec<Value> {
    let (status, body) = http
        .bytes("POST", &format!("/v1/images/build?tag={tag}"), context)
        .await;
    let text = String::from_utf8_lossy(&body).into_owned();
    assert_eq!(status, 200, "{text}");
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("not JSON: {l}")))
        .collect()
}

/// The build's final error event (code, message).
fn error_of(events: &[Value]) -> (String, String) {
    let last = events.last().expect("events");
    assert_eq!(last["event"], "error", "{events:?}");
    (
        last["code"].as_str().unwrap().to_string(),
        last["message"].as_str().unwrap().to_string(),
    )
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

/// A context tar: a Dockerfile and files.
fn context(dockerfile: &str, files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut entries = vec![f("Dockerfile", dockerfile.as_bytes(), 0o644)];
    for (name, data) in files {
        entries.push(f(name, data, 0o644));
    }
    tar_of(&entries)
}

/// Nothing a refused import or build may leave: staging, names of build
/// steps, sandboxes of build steps.
async fn nothing_left(d: &Daemon, http: &Http) {
    let store = d.dir.join("images-store");
    assert_eq!(std::fs::read_dir(store.join("tmp")).unwrap().count(), 0);
    let names = http.ok("GET", "/v1/images", None).await.to_string();
    assert!(
        !names.contains("_build-") && !names.contains("evil"),
        "{names}"
    );
    let all = http.ok("GET", "/v1/sandboxes", None).await;
    let live: Vec<&Value> = all
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["state"] != "destroyed")
        .collect();
    assert!(live.is_empty(), "{live:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_layer_limit_is_a_daemon_setting() {
    let d = Daemon::start(&["--max-layer-mb", "4"]).await;
    let http = d.http();
    // 8 MiB of zeros: a few KiB gzipped, past the 4 MiB limit unpacked.
    let zeros = vec![0u8; 8 << 20];
    let bomb = gzip(&tar_of(&[f("zeros", &zeros, 0o644)]));
    assert!(bomb.len() < 64 << 10);
    let r = http
        .raw(
            "POST",
            "/v1/images/import?name=evil:1",
            oci_archive(std::slice::from_ref(&bomb)),
        )
        .await;
    assert_eq!(r.status, 413, "{}", r.body);
    assert_eq!(r.body["error"]["code"], "payload_too_large");
    // A build context past it.
    let ev = build_raw(
        &http,
        "evil:2",
        gzip(&context("FROM scratch\n", &[("zeros", &zeros)])),
    )
    .await;
    let (code, msg) = error_of(&ev);
    assert_eq!(code, "payload_too_large", "{msg}");
    assert!(msg.contains("build context"), "{msg}");
    // An ADDed archive past it (the context itself is small).
    let df = "FROM scratch\nADD bomb.tar.gz /opt/\n";
    let ev = build_raw(&http, "evil:3", context(df, &[("bomb.tar.gz", &bomb)])).await;
    let (code, msg) = error_of(&ev);
    assert_eq!(code, "payload_too_large", "{msg}");
    assert!(
        msg.contains("line 2: ADD") && msg.contains("bomb.tar.gz"),
        "{msg}"
    );
    nothing_left(&d, &http).await;
    // Within the limit the same paths work (busybox, about 2 MiB).
    import_busybox(&http, "mini:1").await;
    let small = gzip(&tar_of(&[f("opt/app.txt", b"small\n", 0o644)]));
    let df = "FROM mini:1\nADD app.tar.gz /\n";
    let ev = build_raw(&http, "ok:1", context(df, &[("app.tar.gz", &small)])).await;
    assert_eq!(ev.last().unwrap()["event"], "done", "{ev:?}");
    let sb = http
        .create(serde_json::json!({"backend": "process", "image": "ok:1",
            "env": {"PATH": "/bin"}, "lifecycle": {"on_idle": "nothing"}}))
        .await;
    assert_eq!(http.sh(&sb, "cat /opt/app.txt").await, "small\n");
    http.ok("DELETE", &format!("/v1/sandboxes/{sb}"), None)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malicious_context_or_added_archive_is_refused_naming_the_entry() {
    let d = Daemon::start(&[]).await;
    let http = d.http();
    let df = (
        "Dockerfile",
        b"FROM scratch\nCOPY . /\n".to_vec(),
        "",
        0o644,
    );
    let dockerfile = |e: common::archives::E<'static>| {
        let (n, k, data, link, mode) = e;
        tar_of(&[
            (df.0, tar::EntryType::Regular, df.1.clone(), df.2, df.3),
            (n, k, data, link, mode),
        ])
    };
    // The context itself is unpacked with the rules of a plain archive.
    for (ctx, entry) in [
        (dockerfile(f("../../escape", b"x", 0o644)), "../../escape"),
        (dockerfile(l("out", "../../../etc")), "\"out\""),
        (
            dockerfile(("dev/sda", tar::EntryType::Block, vec![], "", 0o600)),
            "dev/sda",
        ),
        (dockerfile(f("bin/su", b"x", 0o4755)), "bin/su"),
        (dockerfile(f("etc/.wh.passwd", b"", 0o644)), ".wh.passwd"),
    ] {
        let (code, msg) = error_of(&build_raw(&http, "evil:1", ctx).await);
        assert_eq!(code, "invalid_argument", "{msg}");
        assert!(
            msg.contains("build context") && msg.contains(entry),
            "{msg}"
        );
    }
    // An ADDed archive: the line, the archive and the entry.
    let evil = gzip(&tar_of(&[
        l("lib", "/usr/lib"),
        f("lib/planted.so", b"x", 0o644),
    ]));
    let df = "FROM scratch\nCOPY Dockerfile /\nADD vendor.tgz /opt/\n";
    let (code, msg) =
        error_of(&build_raw(&http, "evil:2", context(df, &[("vendor.tgz", &evil)])).await);
    assert_eq!(code, "invalid_argument", "{msg}");
    for needle in ["line 3: ADD", "vendor.tgz", "lib/planted.so", "symlink"] {
        assert!(msg.contains(needle), "{needle}: {msg}");
    }
    // A URL: refused at the line, saying why (through the CLI: one line).
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("Dockerfile"),
        "FROM scratch\nADD https://example.com/app.tar.gz /opt/\n",
    )
    .unwrap();
    let o = d.cli(&[
        "image",
        "build",
        "-t",
        "evil:3",
        &dir.path().display().to_string(),
    ]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    let last = err.lines().last().unwrap_or("");
    assert!(
        last.contains("line 2: ADD") && last.contains("no network"),
        "{err}"
    );
    nothing_left(&d, &http).await;
}

/// Two builds of one image at once, each with a RUN step in its own build
/// sandbox: both finish with the same image, a third is all cache hits, and
/// nothing of the build sandboxes or staging remains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_builds_of_one_image_agree_and_share_one_cache() {
    let d = Daemon::start(&[]).await;
    let http = d.http();
    import_busybox(&http, "mini:1").await;
    let ctx = tempfile::tempdir().unwrap();
    std::fs::write(
        ctx.path().join("Dockerfile"),
        "FROM mini:1\nCOPY app.txt /app/\nRUN echo built > /app/run.txt\nENV MODE=x\n",
    )
    .unwrap();
    std::fs::write(ctx.path().join("app.txt"), "app\n").unwrap();
    let c = ctx.path().display().to_string();
    let build = || d.cli(&["--json", "image", "build", "-t", "same:1", &c]);
    let done = |o: &std::process::Output| -> Value {
        assert!(o.status.success(), "{o:?}");
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        serde_json::from_str(out.lines().last().unwrap()).unwrap()
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(build);
        let b = s.spawn(build);
        (a.join().unwrap(), b.join().unwrap())
    });
    let (a, b) = (done(&a), done(&b));
    assert_eq!(a["image"], b["image"], "{a} {b}");
    let again = done(&build());
    assert_eq!(again["image"], a["image"]);
    assert_eq!(again["cache_hits"], 3, "{again}");
    let sb = http
        .create(serde_json::json!({"backend": "process", "image": "same:1",
            "env": {"PATH": "/bin"}, "lifecycle": {"on_idle": "nothing"}}))
        .await;
    assert_eq!(
        http.sh(&sb, "cat /app/app.txt /app/run.txt").await,
        "app\nbuilt\n"
    );
    http.ok("DELETE", &format!("/v1/sandboxes/{sb}"), None)
        .await;
    nothing_left(&d, &http).await;
}
