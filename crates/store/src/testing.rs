//! Helpers for tests (also used by other crates' tests): a real
//! S3-compatible server on loopback, moto's server mode
//! (`pip install 'moto[server]'`, binary `moto_server`).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A running `moto_server` with one bucket; killed on drop.
pub struct MotoServer {
    child: std::process::Child,
    port: u16,
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn find_in_path(bin: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(bin))
            .find(|f| f.is_file())
    })
}

impl MotoServer {
    /// Start `moto_server` on a free loopback port and create `bucket`.
    /// `None` (with a printed line naming `test`) when it is not installed;
    /// panics instead when `STASIS_REQUIRE_S3` is set: a required test must
    /// fail, not skip.
    pub fn start(bucket: &str, test: &str) -> Option<MotoServer> {
        let Some(bin) = find_in_path("moto_server") else {
            if std::env::var_os("STASIS_REQUIRE_S3").is_some() {
                panic!("STASIS_REQUIRE_S3 is set but moto_server is not installed (pip install 'moto[server]')");
            }
            eprintln!("{test} NOT RUN: moto_server not found (pip install 'moto[server]'; set STASIS_REQUIRE_S3=1 to make this fatal)");
            return None;
        };
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = std::process::Command::new(bin)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start moto_server");
        let moto = MotoServer { child, port };
        let t0 = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "moto_server did not start"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(
            s,
            "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut resp = String::new();
        let _ = s.read_to_string(&mut resp);
        assert!(resp.starts_with("HTTP/1.1 200"), "create bucket: {resp}");
        Some(moto)
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Point the AWS variables of this process (and the children it starts)
    /// at this server. Process-wide: callers must not run two servers at once.
    pub fn set_aws_env(&self) {
        std::env::set_var("AWS_ENDPOINT_URL", self.endpoint());
        std::env::set_var("AWS_ACCESS_KEY_ID", "testing");
        std::env::set_var("AWS_SECRET_ACCESS_KEY", "testing");
        std::env::set_var("AWS_REGION", "us-east-1");
        std::env::set_var("AWS_ALLOW_HTTP", "true");
    }
}
