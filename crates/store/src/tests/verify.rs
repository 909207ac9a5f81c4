//! Verification and repair of stored chunks: damage at rest is found
//! before a restore needs the chunk, marked, and put back from an intact
//! local copy.

use super::*;

async fn stored(dir: &Path) -> (Store, TenantId, SnapshotRecord, std::path::PathBuf) {
    let store = open_dir(&dir.join("store"), test_key()).await.unwrap();
    let t = tid("acme");
    let src = dir.join("src");
    let arts = write_artifacts(&src, 11);
    let rec = store
        .put_snapshot(new_meta(&t), &src, &arts, None)
        .await
        .unwrap();
    (store, t, rec, src)
}

/// The object of the first non-zero chunk of artifact `name`.
fn object_of(dir: &Path, t: &TenantId, rec: &SnapshotRecord, name: &str) -> (ChunkAddr, PathBuf) {
    let a = rec.artifact(name).unwrap();
    let c = &a.chunks[a.chunks.len() / 2];
    (c.addr, chunk_file(&dir.join("store"), t, &c.addr))
}

#[tokio::test]
async fn a_whole_snapshot_verifies_clean() {
    let dir = tempfile::tempdir().unwrap();
    let (store, t, rec, _) = stored(dir.path()).await;
    let sc = store.snapshot_chunks(&t, &rec.id).await.unwrap();
    assert_eq!(sc.sites.len() as u64, rec.unique_chunks);
    assert!(store.verify_snapshot(&sc).await.unwrap().is_empty());
}

#[tokio::test]
async fn truncated_flipped_and_missing_chunks_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let (store, t, rec, _) = stored(dir.path()).await;
    let (a_trunc, p_trunc) = object_of(dir.path(), &t, &rec, "disk");
    let (a_flip, p_flip) = object_of(dir.path(), &t, &rec, "fs.tar");
    let (a_gone, p_gone) = object_of(dir.path(), &t, &rec, "memory");
    let data = std::fs::read(&p_trunc).unwrap();
    std::fs::write(&p_trunc, &data[..data.len() / 2]).unwrap();
    let mut data = std::fs::read(&p_flip).unwrap();
    let last = data.len() - 1;
    data[last] ^= 0x40;
    std::fs::write(&p_flip, &data).unwrap();
    std::fs::remove_file(&p_gone).unwrap();

    let sc = store.snapshot_chunks(&t, &rec.id).await.unwrap();
    let bad = store.verify_snapshot(&sc).await.unwrap();
    let mut found: Vec<ChunkAddr> = bad.iter().map(|d| d.site.addr).collect();
    found.sort();
    let mut want = vec![a_trunc, a_flip, a_gone];
    want.sort();
    assert_eq!(found, want, "{bad:?}");
    let gone = bad.iter().find(|d| d.site.addr == a_gone).unwrap();
    assert!(gone.reason.contains("missing"), "{}", gone.reason);
    assert_eq!(gone.site.artifact, "memory");
    // Each damaged chunk is named where it lies in its artifact.
    for d in &bad {
        let a = rec.artifact(&d.site.artifact).unwrap();
        let mut off = 0;
        let at = a
            .chunks
            .iter()
            .find_map(|c| {
                let o = off;
                off += c.len as u64;
                (c.addr == d.site.addr).then_some(o)
            })
            .unwrap();
        assert_eq!(at, d.site.offset);
    }
}

#[tokio::test]
async fn repair_from_an_intact_local_copy_restores_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let (store, t, rec, src) = stored(dir.path()).await;
    let (_, p) = object_of(dir.path(), &t, &rec, "disk");
    let data = std::fs::read(&p).unwrap();
    std::fs::write(&p, &data[..10]).unwrap();
    let sc = store.snapshot_chunks(&t, &rec.id).await.unwrap();
    let bad = store.verify_snapshot(&sc).await.unwrap();
    assert_eq!(bad.len(), 1);
    let mark = SnapshotDamage {
        tenant: t.clone(),
        snapshot: rec.id.clone(),
        found_at_ms: 5,
        chunks: bad.clone(),
    };
    store.mark_damage(&mark).await.unwrap();
    // A restore fails, and says the damage is known.
    let e = store
        .restore_snapshot(&t, &rec.id, &dir.path().join("r1"), None)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::IntegrityError);
    assert!(e.message.contains("known damage"), "{}", e.message);

    // No copy, or a copy with other bytes: nothing is put back.
    assert!(!store.repair_chunk(&sc, &bad[0].site, &[]).await.unwrap());
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, vec![1u8; 700_000]).unwrap();
    let copies = vec![("disk".to_string(), wrong)];
    assert!(!store
        .repair_chunk(&sc, &bad[0].site, &copies)
        .await
        .unwrap());
    assert_eq!(std::fs::read(&p).unwrap().len(), 10, "a wrong copy wrote");
    // A symlink is not followed.
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(src.join("disk"), &link).unwrap();
    let copies = vec![("disk".to_string(), link)];
    assert!(!store
        .repair_chunk(&sc, &bad[0].site, &copies)
        .await
        .unwrap());

    // The intact local file puts it back.
    let copies = vec![("disk".to_string(), src.join("disk"))];
    assert!(store
        .repair_chunk(&sc, &bad[0].site, &copies)
        .await
        .unwrap());
    assert!(store.verify_snapshot(&sc).await.unwrap().is_empty());
    store.clear_damage(&t, &rec.id).await.unwrap();
    assert!(store.damage_of(&t, &rec.id).await.unwrap().is_none());
    let out = dir.path().join("r2");
    store
        .restore_snapshot(&t, &rec.id, &out, None)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(out.join("disk")).unwrap(),
        std::fs::read(src.join("disk")).unwrap()
    );
}

#[tokio::test]
async fn a_zero_chunk_is_repaired_without_a_copy_and_marks_go_with_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_dir(&dir.path().join("store"), test_key())
        .await
        .unwrap();
    let t = tid("acme");
    let src = dir.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("zeros"), vec![0u8; 200_000]).unwrap();
    let arts = vec![("zeros".to_string(), "memory".to_string())];
    let rec = store
        .put_snapshot(new_meta(&t), &src, &arts, None)
        .await
        .unwrap();
    let sc = store.snapshot_chunks(&t, &rec.id).await.unwrap();
    let site = sc.sites[0].clone();
    std::fs::write(chunk_file(&dir.path().join("store"), &t, &site.addr), b"S").unwrap();
    assert_eq!(store.verify_snapshot(&sc).await.unwrap().len(), 1);
    assert!(store.repair_chunk(&sc, &site, &[]).await.unwrap());
    assert!(store.verify_snapshot(&sc).await.unwrap().is_empty());

    let mark = SnapshotDamage {
        tenant: t.clone(),
        snapshot: rec.id.clone(),
        found_at_ms: 1,
        chunks: vec![],
    };
    store.mark_damage(&mark).await.unwrap();
    assert_eq!(store.damage_of(&t, &rec.id).await.unwrap(), Some(mark));
    store.delete_snapshot(&t, &rec.id).await.unwrap();
    assert!(store.damage_of(&t, &rec.id).await.unwrap().is_none());
}
