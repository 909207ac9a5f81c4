//! File metadata is the entry's `user.e2b.*` extended attributes, read by
//! stat and the listing and replaced by a set_meta op, through descriptors
//! beneath the sandbox's root: a symlink is never followed (out of the
//! root or anywhere), and mount points are refused.
mod common;
use common::*;

use std::collections::BTreeMap;

use stasis_backend::Backend;
use stasis_core::{ErrorCode, FileOp};

fn set(path: &str, pairs: &[(&str, &str)]) -> FileOp {
    FileOp::SetMeta {
        path: path.into(),
        meta: meta(pairs),
    }
}

fn meta(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The attribute `name` of `path` as the host sees it.
fn host_xattr(path: &str, name: &str) -> Option<String> {
    let p = std::ffi::CString::new(path).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    let mut buf = [0u8; 256];
    let r = unsafe { libc::lgetxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), 256) };
    (r >= 0).then(|| String::from_utf8_lossy(&buf[..r as usize]).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metadata_is_set_replaced_cleared_and_never_follows_links() {
    let e = env("meta");
    let spec = e.create().await;
    let id = &spec.id;
    let stat = |p: &str| {
        let op = FileOp::Stat { path: p.into() };
        let be = &e.be;
        async move { be.file_op(id, op).await.unwrap().unwrap() }
    };
    let pid: i32 = std::fs::read_to_string(spec.dir.join("run/init.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let host = |p: &str| format!("/proc/{pid}/root{p}");

    e.be.write_file(id, "/workspace/m/a.txt", b"a", None)
        .await
        .unwrap();
    assert_eq!(stat("/workspace/m/a.txt").await.xattrs, None);

    // Set: stat, the listing and the file's attributes agree.
    e.be.file_op(
        id,
        set(
            "/workspace/m/a.txt",
            &[("author", "mish"), ("purpose", "upload")],
        ),
    )
    .await
    .unwrap();
    let want = meta(&[("author", "mish"), ("purpose", "upload")]);
    assert_eq!(stat("/workspace/m/a.txt").await.xattrs, Some(want.clone()));
    let l = e.be.list_files(id, "/workspace/m").await.unwrap();
    assert_eq!(
        (l[0].name.as_str(), l[0].xattrs.clone()),
        ("a.txt", Some(want))
    );
    assert_eq!(
        host_xattr(&host("/workspace/m/a.txt"), "user.e2b.author").as_deref(),
        Some("mish")
    );

    // Replace drops what is not in the map; an empty map clears.
    e.be.file_op(id, set("/workspace/m/a.txt", &[("tag", "b")]))
        .await
        .unwrap();
    assert_eq!(
        stat("/workspace/m/a.txt").await.xattrs,
        Some(meta(&[("tag", "b")]))
    );
    assert_eq!(
        host_xattr(&host("/workspace/m/a.txt"), "user.e2b.author"),
        None
    );
    e.be.file_op(id, set("/workspace/m/a.txt", &[]))
        .await
        .unwrap();
    assert_eq!(stat("/workspace/m/a.txt").await.xattrs, None);

    // A directory carries metadata too; a rename keeps it.
    e.be.file_op(id, set("/workspace/m", &[("k", "dir")]))
        .await
        .unwrap();
    e.be.file_op(
        id,
        FileOp::Rename {
            from: "/workspace/m".into(),
            to: "/workspace/n".into(),
        },
    )
    .await
    .unwrap();
    assert_eq!(
        stat("/workspace/n").await.xattrs,
        Some(meta(&[("k", "dir")]))
    );

    // Symlinks: one to a file inside, one climbing out with `..`; neither
    // is followed, so their targets keep what they had.
    e.be.file_op(id, set("/workspace/n/a.txt", &[("k", "target")]))
        .await
        .unwrap();
    let r = run(
        &e,
        &spec,
        sh("ln -s /workspace/n/a.txt /workspace/n/l && ln -s ../../../../.. /workspace/n/up"),
    )
    .await;
    assert_eq!(out(&r), "", "{r:?}");
    let s = stat("/workspace/n/l").await;
    assert_eq!(
        (s.symlink_target.as_deref(), s.xattrs),
        (Some("/workspace/n/a.txt"), None)
    );
    let e1 =
        e.be.file_op(id, set("/workspace/n/l", &[("k", "changed")]))
            .await;
    assert_eq!(e1.unwrap_err().code, ErrorCode::InvalidArgument);
    assert_eq!(
        stat("/workspace/n/a.txt").await.xattrs,
        Some(meta(&[("k", "target")]))
    );
    // `up/workspace/n/a.txt` resolves inside the root: the same file.
    e.be.file_op(
        id,
        set("/workspace/n/up/workspace/n/a.txt", &[("k", "via")]),
    )
    .await
    .unwrap();
    assert_eq!(
        stat("/workspace/n/a.txt").await.xattrs,
        Some(meta(&[("k", "via")]))
    );
    let l = e.be.list_files(id, "/workspace/n").await.unwrap();
    assert!(
        l.iter()
            .filter(|x| x.name != "a.txt")
            .all(|x| x.xattrs.is_none()),
        "{l:?}"
    );

    // Mount points, missing entries and bad keys are refused.
    let e2 = e.be.file_op(id, set("/proc", &[("k", "v")])).await;
    assert_eq!(e2.unwrap_err().code, ErrorCode::MountPoint);
    let e3 =
        e.be.file_op(id, set("/workspace/n/missing", &[("k", "v")]))
            .await;
    assert_eq!(e3.unwrap_err().code, ErrorCode::NotFound);
    let e4 =
        e.be.file_op(id, set("/workspace/n/a.txt", &[("bad key", "v")]))
            .await;
    assert_eq!(e4.unwrap_err().code, ErrorCode::InvalidArgument);

    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    e.cleanup_parent();
}
