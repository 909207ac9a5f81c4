//! What the benches share: a temporary daemon on the images to measure,
//! commands that must succeed, medians and elapsed milliseconds.

use std::path::PathBuf;
use std::time::Instant;

use serde_json::Value;

use stasis_core::{Error, Result};
use stasis_server::http::exec::ExecResponse;

use crate::client::Client;
use crate::temp_daemon::TempDaemon;

pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub fn ms_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1000.0
}

pub async fn start_daemon(images: Option<PathBuf>, accel: &str) -> Result<(TempDaemon, Value)> {
    let images = images.unwrap_or_else(crate::demo::default_images);
    let images = images.canonicalize().unwrap_or(images);
    let img = images.display().to_string();
    let d = TempDaemon::start(&["--images", &img, "--accel", accel], None).await?;
    let doctor = d.client.get("/v1/doctor").await?;
    let accel = doctor["microvm"]["accelerator"].clone();
    Ok((d, accel))
}

pub async fn exec_ok(c: &Client, id: &str, argv: &[&str]) -> Result<ExecResponse> {
    let r = c.exec(id, argv, 120_000).await?;
    if r.exit_code != Some(0) {
        // stderr quoted as the JSON string it is.
        return Err(Error::internal(format!(
            "{argv:?} failed in {id}: {}",
            Value::from(r.stderr.as_str())
        )));
    }
    Ok(r)
}
