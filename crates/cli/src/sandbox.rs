//! Sandbox commands: create (manifest plus flag overrides), ls, get, pause,
//! resume, rm, usage; and the manifest-file reading `restore` shares.

use std::io::Read;

use clap::Args;
use serde_json::{json, Value};

use stasis_core::{Error, Result};
use stasis_server::http::sandboxes::Sandbox;

use crate::client::Client;
use crate::output::{compact, print_value};

#[derive(Args)]
pub struct CreateArgs {
    /// Manifest JSON file (- for stdin); flags below override its fields.
    #[arg(long)]
    manifest: Option<String>,
    #[arg(long)]
    backend: Option<String>,
    #[arg(long)]
    image: Option<String>,
    #[arg(long)]
    memory_mb: Option<u64>,
    #[arg(long)]
    cpus: Option<f64>,
    /// Idle seconds before the idle policy applies.
    #[arg(long)]
    idle_secs: Option<u64>,
    /// pause | pause_filesystem | destroy | nothing
    #[arg(long)]
    on_idle: Option<String>,
    /// Seconds a paused sandbox is kept.
    #[arg(long)]
    ttl_secs: Option<u64>,
    /// Start from a template (NAME or NAME:VERSION, latest by default)
    /// instead of a cold boot; a manifest given replaces the template's.
    #[arg(long)]
    template: Option<String>,
}

fn fmt_ms(ms: i64) -> String {
    let secs = ms / 1000;
    format!("{secs}s")
}

fn sandbox_line(v: &Sandbox) -> String {
    let mut s = format!(
        "{}  {:<10} {:<8} running {}",
        v.id,
        v.state,
        v.backend,
        fmt_ms(v.running_ms),
    );
    if let Some(h) = &v.standby {
        let left = (h.until_ms - stasis_core::now_ms()).max(0) / 1000;
        s.push_str(&format!(
            "  standby ({} MiB held, {left}s left)",
            h.ram_bytes >> 20
        ));
    }
    if let Some(exp) = v.expires_at_ms {
        let left = (exp - stasis_core::now_ms()) / 1000;
        s.push_str(&format!("  expires in {left}s"));
    }
    if let Some(r) = &v.reason {
        s.push_str(&format!("  ({r})"));
    }
    s
}

/// A lifecycle answer's total time as the text lines print it (`null`
/// when the answer carries no timing).
fn total_ms(v: &Sandbox) -> String {
    compact(&v.timing.as_ref().map(|t| t.total_ms))
}

/// The object `key` of a manifest, created when absent; a manifest file
/// whose `key` is not an object is refused, never silently replaced.
fn section<'a>(m: &'a mut Value, key: &str) -> Result<&'a mut Value, Error> {
    if m.get(key).is_none() {
        m[key] = json!({});
    }
    let v = &mut m[key];
    if !v.is_object() {
        return Err(Error::new(
            stasis_core::ErrorCode::InvalidManifest,
            format!("{key}: must be a JSON object"),
        )
        .with_field(key));
    }
    Ok(v)
}

pub fn read_manifest_arg(arg: &str) -> Result<Value> {
    let text = if arg == "-" {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        s
    } else {
        std::fs::read_to_string(arg)
            .map_err(|e| Error::invalid(format!("manifest file {arg}: {e}")))?
    };
    serde_json::from_str(&text).map_err(|e| Error::invalid(format!("manifest is not JSON: {e}")))
}

/// `stasis create`.
pub async fn create(c: &Client, a: CreateArgs, json: bool) -> Result<()> {
    let mut m = match &a.manifest {
        Some(f) => read_manifest_arg(f)?,
        None => json!({}),
    };
    if !m.is_object() {
        return Err(Error::new(
            stasis_core::ErrorCode::InvalidManifest,
            "manifest: must be a JSON object",
        )
        .with_field("manifest"));
    }
    if let Some(b) = a.backend {
        m["backend"] = json!(b);
    }
    if let Some(i) = a.image {
        m["image"] = json!(i);
    }
    for (key, val) in [
        ("memory_mb", a.memory_mb.map(|v| json!(v))),
        ("cpus", a.cpus.map(|v| json!(v))),
    ] {
        if let Some(v) = val {
            section(&mut m, "resources")?[key] = v;
        }
    }
    for (key, val) in [
        ("idle_timeout_secs", a.idle_secs.map(|v| json!(v))),
        ("on_idle", a.on_idle.map(|v| json!(v))),
        ("paused_ttl_secs", a.ttl_secs.map(|v| json!(v))),
    ] {
        if let Some(v) = val {
            section(&mut m, "lifecycle")?[key] = v;
        }
    }
    let v = match &a.template {
        Some(t) => {
            stasis_server::templates::TemplateRef::parse(t, "template")?;
            // Only what was asked for replaces the template's manifest.
            let given = m.as_object().is_some_and(|o| !o.is_empty());
            c.create_from_template(t, given.then_some(m)).await?
        }
        None => c.create(m).await?,
    };
    print_value(json, &v, |v| v.id.clone());
    Ok(())
}

/// `stasis ls`.
pub async fn ls(c: &Client, state: Option<String>, all: bool, json: bool) -> Result<()> {
    let v = c.list(state.as_deref(), all).await?;
    print_value(json, &v, |v| {
        v.iter().map(sandbox_line).collect::<Vec<_>>().join("\n")
    });
    Ok(())
}

/// `stasis get`.
pub async fn get(c: &Client, id: String, json: bool) -> Result<()> {
    let v = c.sandbox(&id).await?;
    print_value(json, &v, sandbox_line);
    Ok(())
}

/// `stasis pause`.
pub async fn pause(
    c: &Client,
    id: String,
    filesystem_only: bool,
    standby: bool,
    json: bool,
) -> Result<()> {
    let mut body = serde_json::json!({"standby": standby});
    if filesystem_only {
        body["keep_memory"] = false.into();
    }
    let v = c.pause_body(&id, body).await?;
    print_value(json, &v, |v| {
        format!("{} paused in {} ms", v.id, total_ms(v))
    });
    Ok(())
}

/// `stasis resume`.
pub async fn resume(c: &Client, id: String, json: bool) -> Result<()> {
    let v = c.resume(&id).await?;
    print_value(json, &v, |v| {
        format!("{} resumed in {} ms", v.id, total_ms(v))
    });
    Ok(())
}

/// `stasis evict`.
pub async fn evict(c: &Client, id: String, json: bool) -> Result<()> {
    let v = c.evict(&id).await?;
    print_value(json, &v, |v| {
        format!("{}: this node's standby and local files dropped", v.id)
    });
    Ok(())
}

/// `stasis rm`.
pub async fn rm(c: &Client, id: String, json: bool) -> Result<()> {
    let v = c.destroy(&id).await?;
    print_value(json, &v, |v| format!("{} destroyed", v.id));
    Ok(())
}

/// `stasis usage`.
pub async fn usage(c: &Client, id: String, json: bool) -> Result<()> {
    let v = c.usage(&id).await?;
    print_value(json, &v, |v| {
        format!(
            "cpu {} ns, rss {} bytes, {} host processes",
            v.cpu_ns, v.rss_bytes, v.host_processes
        )
    });
    Ok(())
}
