//! `stasis doctor`: what this machine supports, probed locally, plus the
//! running daemon's view when one answers.

use serde_json::{json, Value};

use stasis_backend_microvm::{probe_accelerator, AccelChoice, MicrovmConfig};
use stasis_core::Result;

use crate::client::Client;

fn command_version(cmd: &str, arg: &str) -> Value {
    match std::process::Command::new(cmd).arg(arg).output() {
        Ok(o) if o.status.success() => {
            json!(String::from_utf8_lossy(&o.stdout)
                .lines()
                .next()
                .unwrap_or("")
                .to_string())
        }
        _ => Value::Null,
    }
}

pub async fn run(c: &Client, json_out: bool, probe_kvm: bool) -> Result<()> {
    let images = crate::demo::default_images();
    let mut mcfg = MicrovmConfig::new(images.clone());
    mcfg.accel = if probe_kvm {
        AccelChoice::Auto
    } else {
        AccelChoice::Tcg
    };
    let accel = if probe_kvm {
        serde_json::to_value(probe_accelerator(&mcfg).await).unwrap_or_default()
    } else {
        json!({"probed": false, "note": "skipped (--skip-kvm-probe)"})
    };
    let kvm_dev = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    let daemon = c.get("/v1/doctor").await.ok();
    let report = json!({
        "host": {
            "kernel": command_version("uname", "-r"),
            "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            "root": nix_is_root(),
        },
        "process_backend": stasis_backend_process::probe(),
        "microvm_backend": {
            "qemu": command_version("qemu-system-x86_64", "--version"),
            "qemu_img": command_version("qemu-img", "--version"),
            "dev_kvm_opens": kvm_dev,
            "images_dir": images,
            "default_image_built": images.join("default/vmlinux").exists() && images.join("default/rootfs.qcow2").exists(),
            "accelerator_probe": accel,
            "vhost_vsock": std::path::Path::new("/dev/vhost-vsock").exists(),
        },
        "criu": command_version("criu", "--version").as_str().map(|v| json!(v)).unwrap_or(json!("not installed (process checkpointing unavailable; `criu check` fails on these hosts anyway)")),
        "daemon": daemon,
    });
    if json_out {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        print_text(&report);
    }
    Ok(())
}

fn nix_is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn print_text(v: &Value) {
    fn walk(prefix: &str, v: &Value) {
        match v {
            Value::Object(m) => {
                for (k, val) in m {
                    let p = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&p, val);
                }
            }
            other => println!("{prefix:<48} {other}"),
        }
    }
    walk("", v);
}
