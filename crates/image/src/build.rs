//! Executing a parsed Dockerfile into the store.
//!
//! Each step has a cache key: sha256 of the state before it (the base
//! image, then every earlier step's key and resulting layer), the
//! instruction as expanded, and its inputs (for COPY/ADD the digest of the
//! copied files). A hit reuses the stored layer and config; a miss executes
//! the step and records it. So an unchanged rebuild is all hits, and a
//! changed step rebuilds from there on (its new layer changes every later
//! key). `RUN` goes to a [`StepRunner`] -- the daemon runs it in a build
//! sandbox over the parent's root directory and hands back the changed
//! files as an overlayfs upper directory. A failing RUN stops the build
//! with its output and exit code; the steps before it stay cached. Cache
//! entries, layers and images are written by atomic renames under the
//! store's shared lock, so concurrent builds of one image cannot corrupt it.

use crate::owned;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use stasis_core::{Error, ErrorCode, Result};

use stasis_fsroot::{Dir, Resolve};

use crate::context::{copy_sources, hash_sources, make_dirs, parse_chown, resolve_in_root};
use crate::digest::{Digest, Hasher};
use crate::dockerfile::{self, Command, Instruction, Step};
use crate::layer::{self, ApplyOptions};
use crate::store::{CacheEntry, Image, ImageConfig, ImageStore, LayerRef, Owner, Reference};

/// One RUN step for a [`StepRunner`].
#[derive(Debug)]
pub struct RunStep<'a> {
    /// The parent's complete root directory; the runner must not modify it.
    pub root: &'a Path,
    /// An empty directory for the changes (overlayfs upper format:
    /// deletions as 0/0 character devices, opaque dirs by xattr).
    pub upper: &'a Path,
    pub argv: Vec<String>,
    /// `KEY=value` pairs (image ENV, then build ARGs).
    pub env: Vec<String>,
    pub workdir: String,
    pub user: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    pub exit_code: i32,
    /// Combined stdout and stderr.
    pub output: String,
}

/// Runs a build step in a sandbox. The daemon implements it over a backend;
/// tests use a fake.
pub trait StepRunner: Send + Sync {
    fn run(&self, step: &RunStep<'_>) -> Result<RunOutcome>;
    /// One sentence added to a failed step's error: what about the steps'
    /// sandbox may explain it (e.g. that it has no network egress).
    fn failure_hint(&self) -> Option<String> {
        None
    }
}

/// Lines and bytes of a failed step's output its error carries (the end of
/// it, where a tool's own error is).
pub const FAILED_OUTPUT_LINES: usize = 40;
pub const FAILED_OUTPUT_BYTES: usize = 8 << 10;

/// The last `lines` lines of `output`, at most `bytes` of it (cut at a
/// character boundary), line breaks kept.
pub fn output_tail(output: &str, lines: usize, bytes: usize) -> &str {
    let trimmed = output.trim_end_matches('\n');
    let mut start = trimmed.len();
    for _ in 0..lines {
        match trimmed[..start].rfind('\n') {
            Some(i) => start = i,
            None => {
                start = 0;
                break;
            }
        }
    }
    let mut tail = trimmed[start..].trim_start_matches('\n');
    if tail.len() > bytes {
        let mut cut = tail.len() - bytes;
        while !tail.is_char_boundary(cut) {
            cut += 1;
        }
        tail = &tail[cut..];
    }
    tail
}

/// The `build_failed` error of a RUN step that exited non-zero: its first
/// line says which step and how (and the runner's hint), the rest is the
/// step's output tail as it was.
fn run_failed(step: &Step, out: &RunOutcome, hint: Option<String>) -> Error {
    let head = step_err(step, format!("exited with code {}", out.exit_code)).message;
    let mut message = match hint {
        Some(h) => format!("{head}; {h}"),
        None => head,
    };
    let tail = output_tail(&out.output, FAILED_OUTPUT_LINES, FAILED_OUTPUT_BYTES);
    if !tail.is_empty() {
        message.push_str("\noutput (its end):\n");
        message.push_str(tail);
    }
    Error::new(ErrorCode::BuildFailed, message).with_field("dockerfile")
}

/// Progress, for a terminal (indicatif) or the API's event stream.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum BuildEvent {
    Step {
        index: usize,
        total: usize,
        line: usize,
        text: String,
    },
    Cached {
        index: usize,
    },
    Output {
        index: usize,
        text: String,
    },
    StepDone {
        index: usize,
        seconds: f64,
        layer_bytes: Option<u64>,
    },
    Done {
        image: String,
        name: String,
        tag: String,
        seconds: f64,
        rootfs_bytes: u64,
        layers: usize,
        steps: usize,
        cache_hits: usize,
    },
}

pub struct BuildRequest<'a> {
    pub owner: Owner,
    /// `name[:tag]`.
    pub reference: &'a str,
    pub dockerfile: &'a str,
    /// The build context; COPY/ADD cannot reach outside it.
    pub context: &'a Path,
    pub build_args: HashMap<String, String>,
    pub opts: ApplyOptions,
}

#[derive(Debug)]
pub struct BuildResult {
    pub image: Image,
    pub steps: usize,
    pub cache_hits: usize,
}

/// The state of a build between steps.
struct State<'s> {
    store: &'s ImageStore,
    key: Digest,
    base_rootfs: Option<PathBuf>,
    base_dir: Option<PathBuf>,
    layers: Vec<LayerRef>,
    /// Layers added by this build (applied onto `work` when it exists).
    new_layers: Vec<LayerRef>,
    config: ImageConfig,
    tmp: PathBuf,
    work: Option<PathBuf>,
    log: Vec<String>,
    opts: ApplyOptions,
}

impl State<'_> {
    /// The parent's full root directory, made on the first RUN.
    fn root(&mut self) -> Result<PathBuf> {
        if let Some(w) = &self.work {
            return Ok(w.clone());
        }
        let w = self.tmp.join("root");
        let paths: Vec<PathBuf> = self
            .new_layers
            .iter()
            .map(|l| self.store.layer_path(&l.digest))
            .collect();
        let opts = ApplyOptions {
            allow_setid: true, // the base and our own layers were checked when stored
            ..self.opts
        };
        layer::apply_all_atomic(self.base_rootfs.as_deref(), &paths, &w, &opts)?;
        self.work = Some(w.clone());
        Ok(w)
    }

    fn push_layer(&mut self, l: LayerRef) -> Result<()> {
        if let Some(w) = &self.work {
            layer::apply_file(&self.store.layer_path(&l.digest), w, &self.opts)?;
        }
        self.layers.push(l.clone());
        self.new_layers.push(l);
        Ok(())
    }

    fn advance(&mut self, step_key: &Digest, layer: Option<&LayerRef>) -> Result<()> {
        let mut h = Hasher::default();
        h.field(step_key.as_str().as_bytes());
        h.field(layer.map(|l| l.digest.as_str()).unwrap_or("").as_bytes());
        h.field(&serde_json::to_vec(&self.config)?);
        self.key = h.finish();
        Ok(())
    }
}

fn step_err(step: &Step, why: impl std::fmt::Display) -> Error {
    Error::invalid(format!(
        "Dockerfile line {}: {}: {why}",
        step.line,
        step.text
            .split_whitespace()
            .next()
            .unwrap_or("")
            .to_ascii_uppercase()
    ))
    .with_field("dockerfile")
}

/// Build `req.dockerfile` into the store as `req.owner`'s `req.reference`.
pub fn build(
    store: &ImageStore,
    req: &BuildRequest<'_>,
    runner: &dyn StepRunner,
    progress: &mut dyn FnMut(BuildEvent),
) -> Result<BuildResult> {
    let started = Instant::now();
    let Reference::Name { name, tag } = Reference::parse(req.reference)? else {
        return Err(Error::invalid("name the image name[:tag], not by digest").with_field("tag"));
    };
    let steps = dockerfile::parse(req.dockerfile)?;
    // The daemon's own directory the context was unpacked into.
    let context = owned::canonicalize(req.context)
        .map_err(|e| Error::invalid(format!("build context {}: {e}", req.context.display())))?;
    let _lock = store.lock_shared()?;
    let tmp = store.temp_dir("build")?;
    let r = run_steps(
        store, req, &steps, &context, &tmp, runner, progress, &name, &tag,
    );
    let _ = owned::remove_dir_all(&tmp);
    let (image, hits) = r?;
    progress(BuildEvent::Done {
        image: image.record.id.to_string(),
        name,
        tag,
        seconds: started.elapsed().as_secs_f64(),
        rootfs_bytes: image.record.rootfs_bytes,
        layers: image.record.layers.len(),
        steps: steps.len(),
        cache_hits: hits,
    });
    Ok(BuildResult {
        image,
        steps: steps.len(),
        cache_hits: hits,
    })
}

#[allow(clippy::too_many_arguments)]
fn run_steps(
    store: &ImageStore,
    req: &BuildRequest<'_>,
    steps: &[Step],
    context: &Path,
    tmp: &Path,
    runner: &dyn StepRunner,
    progress: &mut dyn FnMut(BuildEvent),
    name: &str,
    tag: &str,
) -> Result<(Image, usize)> {
    let total = steps.len();
    let mut args: HashMap<String, String> = HashMap::new();
    let mut st: Option<State<'_>> = None;
    let mut hits = 0;
    for (index, step) in steps.iter().enumerate() {
        progress(BuildEvent::Step {
            index: index + 1,
            total,
            line: step.line,
            text: step.text.clone(),
        });
        let t0 = Instant::now();
        // Variables as this step sees them: build ARGs, overridden by ENV.
        let mut vars = args.clone();
        if let Some(s) = &st {
            for e in &s.config.env {
                if let Some((k, v)) = e.split_once('=') {
                    vars.insert(k.into(), v.into());
                }
            }
        }
        let ex = |s: &str| {
            dockerfile::expand(s, &|k| vars.get(k).cloned()).map_err(|e| step_err(step, e))
        };
        let Some(state) = st.as_mut() else {
            match &step.instr {
                Instruction::Arg { name, default } => {
                    let v = req.build_args.get(name).cloned().or(default.clone());
                    args.insert(name.clone(), v.unwrap_or_default());
                }
                Instruction::From(image) => {
                    let image = ex(image)?;
                    st = Some(from(store, req, &image, tmp).map_err(|e| {
                        let code = e.code;
                        Error {
                            code,
                            ..step_err(step, e.message)
                        }
                    })?);
                }
                _ => return Err(step_err(step, "comes before FROM")),
            }
            continue;
        };
        let (canon, copy) = match &step.instr {
            Instruction::Copy {
                srcs,
                dest,
                chown,
                add,
            } => {
                let kw = if *add { "ADD" } else { "COPY" };
                let srcs = srcs.iter().map(|s| ex(s)).collect::<Result<Vec<_>>>()?;
                for s in &srcs {
                    dockerfile::check_local(step.line, kw, s)?;
                }
                let dest = ex(dest)?;
                let digest = hash_sources(context, &srcs).map_err(|e| step_err(step, e.message))?;
                (
                    format!("{kw} {chown:?} {srcs:?} {dest} {digest}"),
                    Some((srcs, dest, chown.clone())),
                )
            }
            Instruction::Run(cmd) => {
                let mut env: Vec<_> = args.iter().map(|(k, v)| format!("{k}={v}")).collect();
                env.sort();
                (format!("RUN {cmd:?} {env:?}"), None)
            }
            Instruction::Arg { name, default } => {
                let v = req
                    .build_args
                    .get(name)
                    .cloned()
                    .or(default.clone())
                    .or(args.get(name).cloned())
                    .unwrap_or_default();
                args.insert(name.clone(), v.clone());
                (format!("ARG {name}={v}"), None)
            }
            Instruction::Env(pairs) => {
                let mut out = Vec::new();
                for (k, v) in pairs {
                    out.push((k.clone(), ex(v)?));
                }
                (format!("ENV {out:?}"), None)
            }
            Instruction::Workdir(s) => (format!("WORKDIR {}", ex(s)?), None),
            Instruction::User(s) => (format!("USER {}", ex(s)?), None),
            other => (format!("{other:?}"), None),
        };
        let mut h = Hasher::default();
        h.field(state.key.as_str().as_bytes());
        h.field(canon.as_bytes());
        let step_key = h.finish();
        if let Some(hit) = store.cache_get(&step_key) {
            hits += 1;
            progress(BuildEvent::Cached { index: index + 1 });
            state.config = hit.config;
            if let Some(l) = &hit.layer {
                state.push_layer(l.clone())?;
            }
            state.advance(&step_key, hit.layer.as_ref())?;
            state
                .log
                .push(format!("step {}: {} (cached)", index + 1, step.text));
            continue;
        }
        let layer = execute(
            state,
            step,
            index + 1,
            copy,
            &vars,
            context,
            runner,
            progress,
            &args,
        )?;
        if let Some(l) = &layer {
            state.push_layer(l.clone())?;
        }
        store.cache_put(
            &step_key,
            &CacheEntry {
                layer: layer.clone(),
                config: state.config.clone(),
            },
        )?;
        state.advance(&step_key, layer.as_ref())?;
        state.log.push(format!("step {}: {}", index + 1, step.text));
        progress(BuildEvent::StepDone {
            index: index + 1,
            seconds: t0.elapsed().as_secs_f64(),
            layer_bytes: layer.as_ref().map(|l| l.size),
        });
    }
    let st = st.ok_or_else(|| Error::invalid("Dockerfile has no FROM"))?;
    let image = store.commit(
        &req.owner,
        name,
        tag,
        st.base_dir.as_deref(),
        st.layers,
        st.config,
        st.log,
        &req.opts,
    )?;
    Ok((image, hits))
}

/// The state right after FROM: `scratch` (empty) or an image the owner sees.
fn from<'s>(
    store: &'s ImageStore,
    req: &BuildRequest<'_>,
    image: &str,
    tmp: &Path,
) -> Result<State<'s>> {
    let mut h = Hasher::default();
    h.field(b"stasis-build-v1");
    let (base_rootfs, base_dir, layers, config) = if image == "scratch" {
        h.field(b"scratch");
        (None, None, vec![], ImageConfig::default())
    } else {
        let img = store.resolve(&req.owner, image).map_err(|e| {
            Error::new(
                e.code,
                format!("FROM {image}: {} (import it or build it first)", e.message),
            )
        })?;
        h.field(img.record.id.as_str().as_bytes());
        (
            Some(img.rootfs.clone()),
            img.record.base_dir.clone(),
            img.record.layers.clone(),
            img.record.config.clone(),
        )
    };
    Ok(State {
        store,
        key: h.finish(),
        base_rootfs,
        base_dir,
        layers,
        new_layers: vec![],
        config,
        tmp: tmp.to_path_buf(),
        work: None,
        log: vec![format!("FROM {image}")],
        opts: req.opts,
    })
}

/// Join `p` onto the working directory (absolute paths stay), normalised.
fn abs_path(workdir: &str, p: &str) -> String {
    let joined = if p.starts_with('/') {
        p.to_string()
    } else {
        format!("{}/{p}", if workdir.is_empty() { "/" } else { workdir })
    };
    let mut parts: Vec<&str> = Vec::new();
    for c in joined.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Execute a cache miss; returns the step's layer, if it makes one.
#[allow(clippy::too_many_arguments)]
fn execute(
    state: &mut State<'_>,
    step: &Step,
    index: usize,
    copy: Option<(Vec<String>, String, Option<String>)>,
    vars: &HashMap<String, String>,
    context: &Path,
    runner: &dyn StepRunner,
    progress: &mut dyn FnMut(BuildEvent),
    args: &HashMap<String, String>,
) -> Result<Option<LayerRef>> {
    let ex =
        |s: &str| dockerfile::expand(s, &|k| vars.get(k).cloned()).map_err(|e| step_err(step, e));
    let upper = state.tmp.join(format!("upper-{index}"));
    owned::create_dir_all(&upper)?;
    let made_layer = match &step.instr {
        Instruction::Env(pairs) => {
            for (k, v) in pairs {
                let v = ex(v)?;
                state.config.set_env(k, &v);
            }
            false
        }
        Instruction::User(u) => {
            state.config.user = ex(u)?;
            false
        }
        Instruction::Workdir(w) => {
            let w = abs_path(&state.config.working_dir, &ex(w)?);
            state.config.working_dir = w.clone();
            let root = Dir::open(&state.root()?, Resolve::InRoot)?;
            make_dirs(
                &Dir::open(&upper, Resolve::NoSymlinks)?,
                &resolve_in_root(&root, &w, false),
            )?;
            true
        }
        Instruction::Cmd(c) => {
            state.config.cmd = Some(c.argv());
            false
        }
        Instruction::Entrypoint(c) => {
            state.config.entrypoint = Some(c.argv());
            false
        }
        Instruction::Arg { .. } => false,
        Instruction::From(_) => return Err(step_err(step, "a second FROM is not supported")),
        Instruction::Copy { add, .. } => {
            let (srcs, dest, chown) = copy.expect("copy operands");
            let owner = chown
                .as_deref()
                .map(parse_chown)
                .transpose()
                .map_err(|e| step_err(step, e))?;
            // Written where the image's symlinks lead; into a directory
            // (Docker's rules) when the destination says so (`dir/`, `.`,
            // several sources) or already is one in the image.
            let root = Dir::open(&state.root()?, Resolve::InRoot)?;
            let abs = abs_path(&state.config.working_dir, &dest);
            let as_dir = resolve_in_root(&root, &abs, false);
            let into_dir = dest.ends_with('/')
                || dest == "."
                || dest.ends_with("/.")
                || srcs.len() > 1
                || root
                    .open_dir(Path::new(as_dir.trim_start_matches('/')))
                    .is_ok();
            let dest = if into_dir {
                format!("{}/", as_dir.trim_end_matches('/'))
            } else {
                resolve_in_root(&root, &abs, true)
            };
            // An ADDed archive unpacks under the build's (the tenant's) limits.
            let add = add.then_some(&state.opts);
            copy_sources(context, &srcs, &upper, &dest, owner, add).map_err(|e| Error {
                code: e.code,
                ..step_err(step, e.message)
            })?;
            true
        }
        Instruction::Run(cmd) => {
            let root = state.root()?;
            let mut env = state.config.env.clone();
            for (k, v) in args {
                if state.config.get_env(k).is_none() {
                    env.push(format!("{k}={v}"));
                }
            }
            let argv = match cmd {
                Command::Shell(s) => vec!["/bin/sh".into(), "-c".into(), s.clone()],
                Command::Exec(v) => v.clone(),
            };
            let out = runner
                .run(&RunStep {
                    root: &root,
                    upper: &upper,
                    argv,
                    env,
                    workdir: if state.config.working_dir.is_empty() {
                        "/".into()
                    } else {
                        state.config.working_dir.clone()
                    },
                    user: state.config.user.clone(),
                })
                .map_err(|e| Error {
                    code: e.code,
                    ..step_err(step, e.message)
                })?;
            if !out.output.is_empty() {
                progress(BuildEvent::Output {
                    index,
                    text: out.output.clone(),
                });
            }
            if out.exit_code != 0 {
                return Err(run_failed(step, &out, runner.failure_hint()));
            }
            true
        }
    };
    if !made_layer {
        return Ok(None);
    }
    let file = state.tmp.join(format!("layer-{index}.tar.zst"));
    layer::write_layer(&upper, &file)?;
    let _ = owned::remove_dir_all(&upper);
    Ok(Some(state.store.put_layer(&file)?))
}

#[cfg(test)]
#[allow(clippy::disallowed_methods)] // fixtures on the tests' own temp dirs
#[path = "build_tests.rs"]
mod tests;
