//! Images: `image build -f Dockerfile -t NAME[:TAG] [CONTEXT]` (the context
//! uploaded as a tar, progress shown with indicatif), `image import FILE.tar [-t NAME]` (an OCI layout or `docker
//! save` archive, uploaded with a progress bar), `image ls`, `image inspect
//! NAME`, `image rm NAME`; and the operator's `admin image register NAME DIR`.

use std::path::PathBuf;

use clap::Subcommand;
use serde_json::{json, Value};

use std::path::Path;

use stasis_core::{Error, ErrorCode, Result};

use crate::client::Client;
use crate::output::print_value;

#[derive(Subcommand)]
pub enum ImageCmd {
    /// Build an image from a Dockerfile and a local context directory.
    Build {
        /// The Dockerfile (default: CONTEXT/Dockerfile).
        #[arg(short = 'f', long = "file")]
        file: Option<PathBuf>,
        /// name[:tag] of the image.
        #[arg(short = 't', long = "tag")]
        tag: String,
        /// KEY=value for an ARG (repeatable).
        #[arg(long = "build-arg")]
        build_arg: Vec<String>,
        /// A destination RUN steps may reach (name, *.domain, CIDR or ip:port; repeatable).
        #[arg(long = "network-allow")]
        network_allow: Vec<String>,
        /// A destination they may not reach, even if allowed (repeatable).
        #[arg(long = "network-deny")]
        network_deny: Vec<String>,
        /// The build context (default: the current directory).
        #[arg(default_value = ".")]
        context: PathBuf,
    },
    /// Import an OCI image layout tar or a `docker save` tar.
    Import {
        file: PathBuf,
        /// name[:tag] (default: the name the archive carries).
        #[arg(short = 't', long = "tag")]
        tag: Option<String>,
    },
    /// Your images, then the public ones.
    Ls,
    /// One image's record: layers, sizes, digests, config, build log.
    Inspect { name: String },
    /// Remove your image's name (its content goes once nothing uses it).
    Rm { name: String },
}

pub(crate) fn enc(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn summary(v: &Value) -> String {
    let r = &v["record"];
    format!(
        "{}  {}  {} layers, rootfs {} bytes",
        v["names"]
            .as_array()
            .and_then(|n| n.first())
            .and_then(|n| n.as_str())
            .unwrap_or("-"),
        v["id"].as_str().unwrap_or("?"),
        r["layers"].as_array().map_or(0, |l| l.len()),
        r["rootfs_bytes"].as_u64().unwrap_or(0)
    )
}

pub async fn image(c: &Client, cmd: ImageCmd, json: bool) -> Result<()> {
    match cmd {
        ImageCmd::Build {
            file,
            tag,
            build_arg,
            network_allow,
            network_deny,
            context,
        } => {
            let network = (!network_allow.is_empty() || !network_deny.is_empty())
                .then(|| serde_json::json!({"allow": network_allow, "deny": network_deny}));
            build(c, file, tag, build_arg, network, context, json).await?
        }
        ImageCmd::Import { file, tag } => {
            let path = match &tag {
                Some(t) => format!("/v1/images/import?name={}", enc(t)),
                None => "/v1/images/import".to_string(),
            };
            let v: Value = c.upload(&path, &file, !json).await?;
            print_value(json, &v, summary);
        }
        ImageCmd::Ls => {
            let v = c.get("/v1/images").await?;
            print_value(json, &v, |v| {
                v.as_array()
                    .into_iter()
                    .flatten()
                    .map(|i| {
                        format!(
                            "{}:{}  {}  {}",
                            i["name"].as_str().unwrap_or("?"),
                            i["tag"].as_str().unwrap_or("?"),
                            i["owner"].as_str().unwrap_or("?"),
                            i["id"].as_str().unwrap_or("?")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
        }
        ImageCmd::Inspect { name } => {
            let v = c.get(&format!("/v1/images/{}", enc(&name))).await?;
            print_value(true, &v, |_| String::new());
        }
        ImageCmd::Rm { name } => {
            c.delete(&format!("/v1/images/{}", enc(&name))).await?;
            print_value(json, &json!({"removed": name}), |_| {
                format!("removed {name}")
            });
        }
    }
    Ok(())
}

/// `stasis admin image register NAME DIR`.
pub async fn register(c: &Client, name: String, dir: PathBuf, json: bool) -> Result<()> {
    let dir = std::fs::canonicalize(&dir)
        .map_err(|e| stasis_core::Error::invalid(format!("{}: {e}", dir.display())))?;
    let v = c
        .post(
            "/v1/admin/images",
            json!({"name": name, "dir": dir.to_string_lossy()}),
        )
        .await?;
    print_value(json, &v, |v| {
        format!(
            "{}:{}  public  {}",
            v["name"].as_str().unwrap_or("?"),
            v["tag"].as_str().unwrap_or("?"),
            v["id"].as_str().unwrap_or("?")
        )
    });
    Ok(())
}

/// The context directory as a tar, with the Dockerfile added at the name
/// the daemon looks for. Symlinks are kept as symlinks.
fn context_tar(context: &Path, dockerfile: &Path, out: &Path) -> Result<()> {
    let io =
        |e: std::io::Error| Error::invalid(format!("build context {}: {e}", context.display()));
    if !context.is_dir() {
        return Err(Error::invalid(format!(
            "build context {} is not a directory",
            context.display()
        )));
    }
    let df = std::fs::read(dockerfile)
        .map_err(|e| Error::invalid(format!("Dockerfile {}: {e}", dockerfile.display())))?;
    let f = std::fs::File::create(out).map_err(io)?;
    let mut b = tar::Builder::new(f);
    b.follow_symlinks(false);
    b.append_dir_all(".", context).map_err(io)?;
    let mut h = tar::Header::new_gnu();
    h.set_size(df.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, ".stasis-dockerfile", &df[..])
        .map_err(io)?;
    b.into_inner().map_err(io)?;
    Ok(())
}

async fn build(
    c: &Client,
    file: Option<PathBuf>,
    tag: String,
    build_arg: Vec<String>,
    network: Option<Value>,
    context: PathBuf,
    json: bool,
) -> Result<()> {
    let dockerfile = file.unwrap_or_else(|| context.join("Dockerfile"));
    let mut args = serde_json::Map::new();
    for a in &build_arg {
        let (k, v) = a
            .split_once('=')
            .ok_or_else(|| Error::invalid(format!("--build-arg {a:?}: expected KEY=value")))?;
        args.insert(k.to_string(), Value::String(v.to_string()));
    }
    let mut path = format!("/v1/images/build?tag={}", enc(&tag));
    if !args.is_empty() {
        path += &format!("&build_args={}", enc(&Value::Object(args).to_string()));
    }
    if let Some(n) = network {
        path += &format!("&network={}", enc(&n.to_string()));
    }
    let bar = if json {
        indicatif::ProgressBar::hidden()
    } else {
        let b = indicatif::ProgressBar::new_spinner();
        b.set_draw_target(indicatif::ProgressDrawTarget::stderr());
        b.enable_steady_tick(std::time::Duration::from_millis(120));
        b
    };
    let r = build_context(c, &context, &dockerfile, &path, |v| {
        match v["event"].as_str() {
            Some("step") => bar.set_message(format!(
                "[{}/{}] {}",
                v["index"],
                v["total"],
                v["text"].as_str().unwrap_or("")
            )),
            Some("cached") => bar.println(format!("[{}] cached", v["index"])),
            Some("output") => bar.println(v["text"].as_str().unwrap_or("").trim_end()),
            Some("step_done") => bar.println(format!(
                "[{}] done in {:.2} s",
                v["index"],
                v["seconds"].as_f64().unwrap_or(0.0)
            )),
            _ => {}
        }
        if json {
            println!("{v}");
        }
    })
    .await;
    bar.finish_and_clear();
    let v = r.map_err(|e| if json { e } else { print_failed_output(e) })?;
    if !json {
        println!(
            "built {}:{}  {}  {} steps ({} cached), {} layers, rootfs {} bytes, {:.2} s",
            v["name"].as_str().unwrap_or("?"),
            v["tag"].as_str().unwrap_or("?"),
            v["image"].as_str().unwrap_or("?"),
            v["steps"],
            v["cache_hits"],
            v["layers"],
            v["rootfs_bytes"],
            v["seconds"].as_f64().unwrap_or(0.0)
        );
    }
    Ok(())
}

/// A failed RUN step's output (the lines after the error's first) printed
/// to stderr as it was, line breaks kept; the error keeps its first line,
/// which says which step failed and how, for the one-line report.
fn print_failed_output(e: Error) -> Error {
    if e.code != ErrorCode::BuildFailed {
        return e;
    }
    match e.message.split_once('\n') {
        Some((head, tail)) => {
            eprintln!("{tail}");
            Error {
                message: head.to_string(),
                ..e
            }
        }
        None => e,
    }
}

/// Upload `context` (with `dockerfile`) to the build route `path`, every
/// event of the stream to `on_event`; the `done` event, or the build's
/// error with its code.
pub async fn build_context(
    c: &Client,
    context: &Path,
    dockerfile: &Path,
    path: &str,
    mut on_event: impl FnMut(&Value),
) -> Result<Value> {
    let tmp = tempfile_path();
    context_tar(context, dockerfile, &tmp)?;
    let mut last: Option<Value> = None;
    let r = c
        .post_file_lines(path, &tmp, |v| {
            on_event(&v);
            last = Some(v);
        })
        .await;
    let _ = std::fs::remove_file(&tmp);
    r?;
    match last {
        Some(v) if v["event"] == "done" => Ok(v),
        Some(v) if v["event"] == "error" => {
            let code = serde_json::from_value(v["code"].clone()).unwrap_or(ErrorCode::Internal);
            Err(Error::new(
                code,
                v["message"].as_str().unwrap_or("build failed").to_string(),
            ))
        }
        _ => Err(Error::internal("the build stream ended without a result")),
    }
}

fn tempfile_path() -> PathBuf {
    std::env::temp_dir().join(format!(
        "stasis-context-{}-{}.tar",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ))
}
