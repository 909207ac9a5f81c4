//! The fake backend's `collect_outputs`: a tar of the manifest's output
//! directories, entries named by their sandbox path without the leading `/`.

use std::path::Path;

use stasis_core::{Error, Result};

use super::sandbox::{resolve, FakeSandbox};

/// Write the tar of `sb`'s output directories to `out`; its size.
pub(super) fn write_tar(sb: &FakeSandbox, out: &Path) -> Result<u64> {
    let err = |e: std::io::Error| Error::internal(format!("outputs tar: {e}"));
    let mut tar = tar::Builder::new(std::fs::File::create(out)?);
    for dir in &sb.outputs {
        let dir = resolve(&sb.workdir, dir)?;
        let under = |p: &str| p == dir || p.starts_with(&format!("{dir}/"));
        for d in sb.dirs.iter().filter(|d| under(d)) {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Directory);
            h.set_mode(0o755);
            h.set_size(0);
            tar.append_data(&mut h, d.trim_start_matches('/'), std::io::empty())
                .map_err(err)?;
        }
        for (p, f) in sb.files.iter().filter(|(p, _)| under(p)) {
            let mut h = tar::Header::new_gnu();
            h.set_mode(f.mode);
            h.set_size(f.data.len() as u64);
            tar.append_data(&mut h, p.trim_start_matches('/'), f.data.as_slice())
                .map_err(err)?;
        }
    }
    tar.into_inner().map_err(err)?.sync_all()?;
    Ok(std::fs::metadata(out)?.len())
}
