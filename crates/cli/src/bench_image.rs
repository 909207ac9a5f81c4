//! The image half of `stasis bench template`: the test Dockerfile (FROM the
//! stasis base: RUN, COPY, ADD of a local tar, ENV, WORKDIR, USER, CMD; a
//! local context, no network) built cold and then rebuilt fully cached, and
//! the image's size: its unpacked root, its stored layers, the disk its
//! root holds of its own (files it shares with the base by hard link are
//! not counted), and the qcow2 root disk of the microVM backend with the
//! time of the first create that builds it.

use std::path::Path;
use std::time::Instant;

use serde_json::{json, Value};

use stasis_core::{Error, Result};

use crate::client::Client;
use crate::image::{build_context, enc};
use crate::measure::exec_ok;

/// The test Dockerfile: the one `crates/cli/tests/images_user.rs` runs on
/// both backends, with its ADD archive plain here.
pub const DOCKERFILE: &str = "FROM stasis-base:bookworm\n\
    RUN useradd --create-home --uid 1500 app\n\
    ENV APP_MODE=test\n\
    WORKDIR /home/app/work\n\
    COPY hello.txt ./\n\
    ADD vendor.tar /opt/vendor/\n\
    RUN chown -R app:app /home/app/work\n\
    USER app\n\
    RUN id -un > built-as.txt && touch /home/app/work/own.txt\n\
    CMD [\"python3\", \"-c\", \"import os; print('default command as', os.getuid())\"]\n";

const TAG: &str = "bench-app:1";

fn write_context(dir: &Path) -> Result<()> {
    std::fs::write(dir.join("Dockerfile"), DOCKERFILE)?;
    std::fs::write(dir.join("hello.txt"), "hello\n")?;
    let mut b = tar::Builder::new(Vec::new());
    let data = b"VERSION = 2\n";
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    b.append_data(&mut h, "lib/v.py", &data[..])?;
    std::fs::write(dir.join("vendor.tar"), b.into_inner()?)?;
    Ok(())
}

/// Allocated bytes of a file (what it takes on disk; a qcow2 is sparse).
fn allocated(p: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(p).map_or(0, |m| m.blocks() * 512)
}

/// Build, rebuild, measure; with `microvm`, also the first microVM create
/// from the image (which builds its qcow2 root disk) to a first exec.
pub async fn figures(c: &Client, data_dir: &Path, microvm: bool) -> Result<Value> {
    if c.get("/v1/images/stasis-base:bookworm").await.is_err() {
        return Ok(json!({"skipped": "this daemon has no stasis base \
            (the guest image build leaves it; scripts/setup.sh)"}));
    }
    let ctx = tempfile::tempdir()?;
    write_context(ctx.path())?;
    let path = format!("/v1/images/build?tag={}", enc(TAG));
    let df = ctx.path().join("Dockerfile");
    let t = Instant::now();
    let cold = build_context(c, ctx.path(), &df, &path, |_| {}).await?;
    let cold_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let cached = build_context(c, ctx.path(), &df, &path, |_| {}).await?;
    let cached_s = t.elapsed().as_secs_f64();
    let info = c.get(&format!("/v1/images/{}", enc(TAG))).await?;
    let rec = &info["record"];
    let layers: Vec<u64> = rec["layers"]
        .as_array()
        .map(|v| v.iter().filter_map(|l| l["size"].as_u64()).collect())
        .unwrap_or_default();
    let id = info["id"].as_str().unwrap_or_default().to_string();
    let dir = data_dir
        .join("images-store/images")
        .join(id.trim_start_matches("sha256:"));
    let mut out = json!({
        "dockerfile_steps": cold["steps"],
        "build_cold_s": cold_s,
        "build_cached_s": cached_s,
        "cached_rebuild_hits": cached["cache_hits"],
        "rootfs_unpacked_bytes": rec["rootfs_bytes"],
        "layers": layers.len(),
        "layers_stored_bytes": layers.iter().sum::<u64>(),
        "rootfs_own_disk_bytes": stasis_image::store::own_disk_bytes(&dir.join("rootfs")),
    });
    if microvm {
        let t = Instant::now();
        let sb = c
            .create(json!({"backend": "microvm", "image": TAG,
                           "lifecycle": {"on_idle": "nothing"}}))
            .await?;
        let who = exec_ok(c, &sb.id, &["id", "-un"]).await?;
        let first_s = t.elapsed().as_secs_f64();
        c.destroy(&sb.id).await?;
        if who.stdout.trim() != "app" {
            return Err(Error::internal(format!(
                "the image's USER is app, the microVM ran as {:?}",
                who.stdout
            )));
        }
        let qcow2 = dir.join("guest/rootfs.qcow2");
        out["microvm_first_create_to_exec_s"] = json!(first_s);
        out["qcow2_bytes"] = json!(std::fs::metadata(&qcow2).map_or(0, |m| m.len()));
        out["qcow2_disk_bytes"] = json!(allocated(&qcow2));
    }
    c.delete(&format!("/v1/images/{}", enc(TAG))).await?;
    Ok(out)
}
