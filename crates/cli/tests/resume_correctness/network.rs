//! Point 9: a listening socket and a loopback connection survive a pause.

use super::*;

// ----- point 9 --------------------------------------------------------------------

const SERVER_PY: &str = r#"
import functools, http.server, os, socket, threading
echo = socket.socket()
echo.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
echo.bind(('127.0.0.1', 8766))
echo.listen()
def serve(c):
    while True:
        d = c.recv(4096)
        if not d:
            break
        c.sendall(b'echo:' + d)
def accept():
    while True:
        c, _ = echo.accept()
        threading.Thread(target=serve, args=(c,), daemon=True).start()
threading.Thread(target=accept, daemon=True).start()
h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=os.getcwd())
srv = http.server.ThreadingHTTPServer(('127.0.0.1', 8765), h)
print('ready', flush=True)
srv.serve_forever()
"#;

const FETCH_PY: &str = "import urllib.request\nprint(urllib.request.urlopen('http://127.0.0.1:8765/hello.txt', timeout=20).read().decode(), end='')\n";

/// Connections across pause. What survives: the host-guest channel (every
/// resume reconnects it by itself: every request after a resume in this suite
/// goes through it), listening sockets in the guest (an HTTP server started
/// before the pause answers after it), and established connections *inside*
/// the guest over loopback (both ends are in the paused memory image, so the
/// same socket keeps working). What does not: established TCP connections to
/// the outside world would be reset (their peer's state moved on while the
/// guest was stopped; a restore also gets a new identity) — not testable
/// here, since the microVM has no external NIC at present and the process
/// backend's network namespace is empty.
pub(super) async fn listening_socket_survives_pause(b: B) {
    let mut d = TestDaemon::start(&format!("p9_sockets::{}", b.name())).await;
    let mut h = d.http();
    let id = h.create(manifest(b, json!({"on_idle": "nothing"}))).await;
    put_file(&h, &id, "srv.py", SERVER_PY.as_bytes()).await;
    put_file(&h, &id, "hello.txt", b"hello from the guest\n").await;
    let srv = start_session(&h, &id, &["python3", "-u", "srv.py"]).await;
    h.session_until(&id, &srv, 0, "ready").await;
    let v = h.exec(&id, &["python3", "-c", FETCH_PY]).await;
    assert_eq!(v["stdout"], "hello from the guest\n", "{v}");
    let cl = start_session(&h, &id, &["python3", "-i", "-u", "-q"]).await;
    h.send(
        &id,
        &cl,
        "import socket\nc = socket.create_connection(('127.0.0.1', 8766))\nc.sendall(b'one')\nprint('got', c.recv(100))\n",
    )
    .await;
    let (_, off) = h.session_until(&id, &cl, 0, "got b'echo:one'").await;
    pause(&h, &id).await;
    if b == B::Microvm {
        h = d.restart().await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    // A new connection to the listening socket, from inside the guest.
    let v = h.exec(&id, &["python3", "-c", FETCH_PY]).await;
    assert_eq!(
        v["stdout"], "hello from the guest\n",
        "listening socket did not survive: {v}"
    );
    // The connection established before the pause still works.
    h.send(&id, &cl, "c.sendall(b'two')\nprint('got', c.recv(100))\n")
        .await;
    h.session_until(&id, &cl, off, "got b'echo:two'").await;
}
