//! The fake backend's artifacts: the writable layer (`fs.json`), the memory
//! image (`memory.json`: memory map and sessions) and, written last, their
//! checksums (`fake.json`), so a stage is complete only once that exists
//! and a changed artifact fails verification (`integrity_error`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};
use stasis_core::{Error, Result};

use super::sandbox::{FakeFile, FakeSandbox, FakeSession};
use crate::{Artifact, ArtifactKind};

/// The writable layer, as an artifact.
pub const FS_ARTIFACT: &str = "fs.json";
/// The memory map, as an artifact (pauses that keep memory, snapshots).
pub const MEMORY_ARTIFACT: &str = "memory.json";
/// Checksums of the two above: written last, so its presence means complete.
pub const META_ARTIFACT: &str = "fake.json";

#[derive(Serialize, Deserialize)]
struct FsLayer {
    files: BTreeMap<String, FakeFile>,
    dirs: BTreeSet<String>,
}

/// What a pause that keeps memory saves: the memory map and the sessions.
#[derive(Serialize, Deserialize)]
struct MemoryImage {
    memory: BTreeMap<String, String>,
    sessions: BTreeMap<String, FakeSession>,
}

#[derive(Serialize, Deserialize)]
struct ArtifactsMeta {
    fs: u64,
    memory: Option<u64>,
}

/// FNV-1a: enough to tell a changed artifact from its original.
fn checksum(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100_0000_01b3)
    })
}

/// Write the sandbox's state as artifacts into `out`.
pub(super) fn write(sb: &FakeSandbox, out: &Path, memory: bool) -> Result<Vec<Artifact>> {
    let fs = serde_json::to_vec(&FsLayer {
        files: sb.files.clone(),
        dirs: sb.dirs.clone(),
    })?;
    std::fs::write(out.join(FS_ARTIFACT), &fs)?;
    let mut arts = vec![Artifact {
        name: FS_ARTIFACT.into(),
        kind: ArtifactKind::FsLayer,
        size: fs.len() as u64,
        block: None,
    }];
    let mut meta = ArtifactsMeta {
        fs: checksum(&fs),
        memory: None,
    };
    if memory {
        let mem = serde_json::to_vec(&MemoryImage {
            memory: sb.memory.clone(),
            sessions: sb.sessions.clone(),
        })?;
        std::fs::write(out.join(MEMORY_ARTIFACT), &mem)?;
        meta.memory = Some(checksum(&mem));
        arts.push(Artifact {
            name: MEMORY_ARTIFACT.into(),
            kind: ArtifactKind::Memory,
            size: mem.len() as u64,
            block: None,
        });
    }
    let m = serde_json::to_vec(&meta)?;
    std::fs::write(out.join(META_ARTIFACT), &m)?;
    arts.push(Artifact {
        name: META_ARTIFACT.into(),
        kind: ArtifactKind::Meta,
        size: m.len() as u64,
        block: None,
    });
    Ok(arts)
}

/// A sandbox from the artifacts in `dir`: None when `dir` has none;
/// `integrity_error` when they do not verify.
pub(super) fn read(workdir: &str, dir: &Path) -> Result<Option<(FakeSandbox, Vec<Artifact>)>> {
    let Ok(m) = std::fs::read(dir.join(META_ARTIFACT)) else {
        return Ok(None);
    };
    let bad = |what: &str| Error::integrity(format!("fake artifacts: {what}"));
    let meta: ArtifactsMeta = serde_json::from_slice(&m).map_err(|_| bad("meta"))?;
    let fs = std::fs::read(dir.join(FS_ARTIFACT)).map_err(|_| bad("no fs layer"))?;
    if checksum(&fs) != meta.fs {
        return Err(bad("fs layer checksum"));
    }
    let layer: FsLayer = serde_json::from_slice(&fs).map_err(|_| bad("fs layer"))?;
    let mut sb = FakeSandbox::new(workdir);
    sb.files = layer.files;
    sb.dirs.extend(layer.dirs);
    let mut arts = vec![
        Artifact {
            name: FS_ARTIFACT.into(),
            kind: ArtifactKind::FsLayer,
            size: fs.len() as u64,
            block: None,
        },
        Artifact {
            name: META_ARTIFACT.into(),
            kind: ArtifactKind::Meta,
            size: m.len() as u64,
            block: None,
        },
    ];
    if let Some(sum) = meta.memory {
        let mem = std::fs::read(dir.join(MEMORY_ARTIFACT)).map_err(|_| bad("no memory"))?;
        if checksum(&mem) != sum {
            return Err(bad("memory checksum"));
        }
        let image: MemoryImage = serde_json::from_slice(&mem).map_err(|_| bad("memory"))?;
        sb.memory = image.memory;
        sb.sessions = image.sessions;
        arts.push(Artifact {
            name: MEMORY_ARTIFACT.into(),
            kind: ArtifactKind::Memory,
            size: mem.len() as u64,
            block: None,
        });
    }
    Ok(Some((sb, arts)))
}
