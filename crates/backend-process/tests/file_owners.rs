//! The file API's owners are ids as the sandbox sees them (its user
//! namespace's, not the host's), and a chown gives an entry away through
//! descriptors beneath the sandbox's root: a symlink is changed itself,
//! never followed out of the root, and mount points are refused.
mod common;
use common::*;

use std::os::unix::fs::MetadataExt;

use stasis_backend::Backend;
use stasis_core::{ErrorCode, FileOp};

fn chown(path: &str, uid: u32, gid: u32) -> FileOp {
    FileOp::Chown {
        path: path.into(),
        uid,
        gid,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_are_inside_ids_and_chown_stays_beneath_the_root() {
    let e = env("owners");
    let spec = e.create().await;
    let id = &spec.id;
    let stat = |p: &str| {
        let op = FileOp::Stat { path: p.into() };
        let be = &e.be;
        async move { be.file_op(id, op).await.unwrap().unwrap() }
    };

    // Written by the file API: root's inside (a host id outside).
    e.be.write_file(id, "/tmp/o/a.txt", b"a", None)
        .await
        .unwrap();
    let st = stat("/tmp/o/a.txt").await;
    assert_eq!((st.uid, st.gid), (Some(0), Some(0)));
    let pid: i32 = std::fs::read_to_string(spec.dir.join("run/init.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let host = std::fs::metadata(format!("/proc/{pid}/root/tmp/o/a.txt"))
        .unwrap()
        .uid();
    assert!(host >= 100_000, "the sandbox runs in a user namespace");

    // Given to uid 1000 inside: the sandbox, the stat and the listing agree.
    e.be.file_op(id, chown("/tmp/o/a.txt", 1000, 1000))
        .await
        .unwrap();
    e.be.file_op(id, chown("/tmp/o", 1000, 1001)).await.unwrap();
    let st = stat("/tmp/o/a.txt").await;
    assert_eq!((st.uid, st.gid), (Some(1000), Some(1000)));
    let l = e.be.list_files(id, "/tmp/o").await.unwrap();
    assert_eq!((l[0].name.as_str(), l[0].uid), ("a.txt", Some(1000)));
    let r = run(&e, &spec, sh("stat -c '%u %g' /tmp/o/a.txt /tmp/o")).await;
    assert_eq!(out(&r), "1000 1000\n1000 1001\n", "{r:?}");
    let v = std::fs::metadata(format!("/proc/{pid}/root/tmp/o/a.txt")).unwrap();
    assert_eq!((v.uid(), v.gid()), (host + 1000, host + 1000));

    // Symlinks: a link to /etc/passwd is changed itself; a link climbing
    // with `..` resolves inside the root.
    let r = run(
        &e,
        &spec,
        sh(
            "ln -s /etc/passwd /tmp/o/pw && ln -s ../../../../.. /tmp/o/up && \
            echo t > /tmp/top && stat -c '%u' /etc/passwd",
        ),
    )
    .await;
    assert_eq!(out(&r), "0\n", "{r:?}");
    e.be.file_op(id, chown("/tmp/o/pw", 1000, 1000))
        .await
        .unwrap();
    e.be.file_op(id, chown("/tmp/o/up/tmp/top", 1002, 1002))
        .await
        .unwrap();
    let r = run(&e, &spec, sh("stat -c '%u' /tmp/o/pw /etc/passwd /tmp/top")).await;
    assert_eq!(out(&r), "1000\n0\n1002\n", "{r:?}");
    let pw = stat("/tmp/o/pw").await;
    assert_eq!(
        (pw.uid, pw.symlink_target.as_deref()),
        (Some(1000), Some("/etc/passwd"))
    );

    // Ids the namespace does not map, and mount points, are refused.
    let e1 = e.be.file_op(id, chown("/tmp/o/a.txt", 70_000, 0)).await;
    assert_eq!(e1.unwrap_err().code, ErrorCode::InvalidArgument);
    let e2 = e.be.file_op(id, chown("/proc", 1000, 1000)).await;
    assert_eq!(e2.unwrap_err().code, ErrorCode::MountPoint);
    let e3 = e.be.file_op(id, chown("/tmp/o/missing", 1000, 1000)).await;
    assert_eq!(e3.unwrap_err().code, ErrorCode::NotFound);

    e.be.destroy(&spec.id, &spec.dir).await.unwrap();
    e.cleanup_parent();
}
