use super::*;
use crate::layer::tests::{file, tar_bytes};
use std::fs;

fn layer(store: &ImageStore, entries: &[crate::layer::tests::E<'_>]) -> LayerRef {
    let p = store.temp_dir("t").unwrap().join("l.tar");
    fs::write(&p, tar_bytes(entries)).unwrap();
    store.put_layer(&p).unwrap()
}

fn t(name: &str) -> Owner {
    Owner::Tenant(name.into())
}

#[test]
fn layers_are_stored_once_by_digest() {
    let tmp = tempfile::tempdir().unwrap();
    let s = ImageStore::open(tmp.path()).unwrap();
    let a = layer(&s, &[file("x", b"1")]);
    let b = layer(&s, &[file("x", b"1")]);
    assert_eq!(a, b);
    assert_eq!(fs::read_dir(tmp.path().join("layers")).unwrap().count(), 1);
    assert_eq!(Digest::of_file(&s.layer_path(&a.digest)).unwrap(), a.digest);
}

#[test]
fn names_tags_digests_and_tenancy() {
    let tmp = tempfile::tempdir().unwrap();
    let s = ImageStore::open(tmp.path()).unwrap();
    let l = layer(&s, &[file("etc/app", b"v1")]);
    let cfg = ImageConfig {
        env: vec!["A=1".into()],
        ..Default::default()
    };
    let opts = ApplyOptions::default();
    let img = s
        .commit(
            &t("alice"),
            "app",
            "v1",
            None,
            vec![l.clone()],
            cfg.clone(),
            vec!["log".into()],
            &opts,
        )
        .unwrap();
    assert_eq!(fs::read(img.rootfs.join("etc/app")).unwrap(), b"v1");
    assert!(img.record.rootfs_bytes >= 2);
    let on_disk: ImageRecord =
        serde_json::from_slice(&fs::read(img.dir.join("image.json")).unwrap()).unwrap();
    assert_eq!(on_disk.layers, vec![l.clone()]);
    assert_eq!(on_disk.build_log, vec!["log".to_string()]);

    // By name:tag and by digest, for the owner.
    assert_eq!(
        s.resolve(&t("alice"), "app:v1").unwrap().record.id,
        img.record.id
    );
    assert_eq!(
        s.resolve(&t("alice"), img.record.id.as_str())
            .unwrap()
            .rootfs,
        img.rootfs
    );
    // No tag means latest, which does not exist.
    assert_eq!(
        s.resolve(&t("alice"), "app").unwrap_err().code,
        ErrorCode::NotFound
    );
    // Another tenant finds neither the name nor the digest.
    for r in ["app:v1", img.record.id.as_str()] {
        assert_eq!(
            s.resolve(&t("bob"), r).unwrap_err().code,
            ErrorCode::NotFound,
            "{r}"
        );
    }
    assert!(s.list(&t("bob")).unwrap().is_empty());
    // Public images are visible to all, and a tenant's own name wins.
    s.commit(
        &Owner::Public,
        "base",
        "latest",
        None,
        vec![l.clone()],
        ImageConfig::default(),
        vec![],
        &opts,
    )
    .unwrap();
    assert!(s.resolve(&t("bob"), "base").is_ok());
    let names = s.list(&t("alice")).unwrap();
    assert_eq!(
        names
            .iter()
            .map(|n| (n.name.as_str(), n.owner.as_str()))
            .collect::<Vec<_>>(),
        vec![("app", "alice"), ("base", "public")]
    );
    // Tenants cannot delete public names; owners delete their own.
    assert_eq!(
        s.delete(&t("bob"), "base").unwrap_err().code,
        ErrorCode::NotFound
    );
    assert_eq!(s.delete(&t("alice"), "app:v1").unwrap(), img.record.id);
    assert!(s.resolve(&t("alice"), "app:v1").is_err());
}

#[test]
fn bad_references_are_refused() {
    for bad in [
        "",
        "../x",
        "a/b",
        ".hidden",
        "x:",
        "x:a/b",
        "sha256:zz",
        "/etc",
    ] {
        assert_eq!(
            Reference::parse(bad).unwrap_err().code,
            ErrorCode::InvalidArgument,
            "{bad}"
        );
    }
    assert_eq!(
        Reference::parse("py:3.11").unwrap(),
        Reference::Name {
            name: "py".into(),
            tag: "3.11".into()
        }
    );
}

#[test]
fn gc_spares_named_and_in_use_images_and_their_layers() {
    let tmp = tempfile::tempdir().unwrap();
    let s = ImageStore::open(tmp.path()).unwrap();
    let opts = ApplyOptions::default();
    let shared = layer(&s, &[file("shared", b"s")]);
    let only_a = layer(&s, &[file("a", b"a")]);
    let only_b = layer(&s, &[file("b", b"b")]);
    let a = s
        .commit(
            &t("x"),
            "a",
            "latest",
            None,
            vec![shared.clone(), only_a.clone()],
            ImageConfig::default(),
            vec![],
            &opts,
        )
        .unwrap();
    let b = s
        .commit(
            &t("x"),
            "b",
            "latest",
            None,
            vec![shared.clone(), only_b.clone()],
            ImageConfig::default(),
            vec![],
            &opts,
        )
        .unwrap();
    s.cache_put(
        &Digest::of_bytes(b"step"),
        &CacheEntry {
            layer: Some(only_a.clone()),
            config: ImageConfig::default(),
        },
    )
    .unwrap();
    s.delete(&t("x"), "a").unwrap();
    s.delete(&t("x"), "b").unwrap();
    // b is still used by a sandbox: it and its layers stay.
    let in_use: HashSet<Digest> = [b.record.id.clone()].into();
    let r = s.gc(&in_use).unwrap();
    assert_eq!((r.images_removed, r.layers_removed), (1, 1));
    assert!(!a.dir.exists());
    assert!(b.rootfs.join("b").is_file());
    assert!(s.layer_path(&shared.digest).is_file());
    assert!(!s.layer_path(&only_a.digest).exists());
    assert!(
        s.cache_get(&Digest::of_bytes(b"step")).is_none(),
        "stale cache entry"
    );
    let r = s.gc(&HashSet::new()).unwrap();
    assert_eq!((r.images_removed, r.layers_removed), (1, 2));
}

#[test]
fn a_registered_directory_is_used_in_place() {
    let tmp = tempfile::tempdir().unwrap();
    let s = ImageStore::open(&tmp.path().join("store")).unwrap();
    let host = tmp.path().join("hostdir");
    fs::create_dir_all(host.join("bin")).unwrap();
    let img = s
        .commit(
            &Owner::Public,
            "base",
            "latest",
            Some(&host),
            vec![],
            ImageConfig::default(),
            vec![],
            &ApplyOptions::default(),
        )
        .unwrap();
    assert_eq!(img.rootfs, host);
    assert!(!img.dir.join("rootfs").exists());
    // An image on top of it gets a materialised copy plus its layers.
    let l = layer(&s, &[file("app", b"1")]);
    let child = s
        .commit(
            &Owner::Public,
            "child",
            "latest",
            Some(&host),
            vec![l],
            ImageConfig::default(),
            vec![],
            &ApplyOptions::default(),
        )
        .unwrap();
    assert!(child.rootfs.join("bin").is_dir() && child.rootfs.join("app").is_file());
    assert!(!host.join("app").exists());
}

#[test]
fn clean_stale_drops_crash_leftovers_only() {
    let tmp = tempfile::tempdir().unwrap();
    let s = ImageStore::open(tmp.path()).unwrap();
    let l = layer(&s, &[file("x", b"1")]);
    let opts = ApplyOptions::default();
    s.commit(
        &t("a"),
        "keep",
        "1",
        None,
        vec![l.clone()],
        ImageConfig::default(),
        vec![],
        &opts,
    )
    .unwrap();
    s.commit(
        &t("a"),
        "_build-123",
        "run",
        None,
        vec![l],
        ImageConfig::default(),
        vec![],
        &opts,
    )
    .unwrap();
    fs::create_dir_all(s.temp_dir("build").unwrap().join("root")).unwrap();
    let leftovers = fs::read_dir(tmp.path().join("tmp")).unwrap().count() as u64;
    assert!(leftovers >= 1);
    assert_eq!(
        s.clean_stale().unwrap(),
        leftovers + 1,
        "tmp entries and one _build- name"
    );
    assert_eq!(fs::read_dir(tmp.path().join("tmp")).unwrap().count(), 0);
    assert!(s.resolve(&t("a"), "keep:1").is_ok());
    assert!(s.resolve(&t("a"), "_build-123:run").is_err());
}

/// An image on another shares the files it does not change (hard links to
/// the nearest stored root, or to a registered directory), holds on disk
/// only what it changes, never alters the root it started from, and GC
/// counts only its own blocks as freed.
#[test]
fn an_image_shares_its_ancestors_unchanged_files() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let s = ImageStore::open(&tmp.path().join("store")).unwrap();
    let opts = ApplyOptions::default();
    let big: Vec<u8> = (0..(1u32 << 20)).map(|i| (i * 7 % 251) as u8).collect();
    let host = tmp.path().join("hostdir");
    fs::create_dir_all(host.join("etc")).unwrap();
    fs::write(host.join("etc/big"), &big).unwrap();
    fs::write(host.join("etc/conf"), b"host").unwrap();
    let commit = |name: &str, base: Option<&Path>, layers: Vec<LayerRef>| {
        s.commit(
            &t("x"),
            name,
            "1",
            base,
            layers,
            ImageConfig::default(),
            vec![],
            &opts,
        )
        .unwrap()
    };
    let ino = |p: &Path| fs::metadata(p).unwrap().ino();
    // On a registered directory (the stasis base's case).
    let l1 = layer(&s, &[file("etc/conf", b"one")]);
    let one = commit("one", Some(&host), vec![l1.clone()]);
    assert_eq!(ino(&one.rootfs.join("etc/big")), ino(&host.join("etc/big")));
    assert_eq!(fs::read(host.join("etc/conf")).unwrap(), b"host");
    assert_eq!(fs::read(one.rootfs.join("etc/conf")).unwrap(), b"one");
    // FROM that image: its root is the start, only the new layer applied.
    let l2 = layer(&s, &[file("etc/conf", b"two"), file("etc/.wh.big", b"")]);
    let l3 = layer(&s, &[file("app", b"app")]);
    let two = commit("two", Some(&host), vec![l1.clone(), l2.clone()]);
    let three = commit("three", Some(&host), vec![l1.clone(), l3]);
    assert_eq!(fs::read(one.rootfs.join("etc/conf")).unwrap(), b"one");
    assert_eq!(fs::read(two.rootfs.join("etc/conf")).unwrap(), b"two");
    assert!(!two.rootfs.join("etc/big").exists());
    assert!(
        one.rootfs.join("etc/big").is_file(),
        "a whiteout unlinks only its own"
    );
    assert_eq!(
        ino(&three.rootfs.join("etc/big")),
        ino(&host.join("etc/big"))
    );
    assert_eq!(
        ino(&three.rootfs.join("etc/conf")),
        ino(&one.rootfs.join("etc/conf"))
    );
    // Its disk of its own: directories and `app`, not the 1 MiB file.
    let own = own_disk_bytes(&three.dir);
    assert!(own < 256 << 10, "{own}");
    assert!(tree_bytes(&three.rootfs) > 1 << 20);
    // Layers alone (no base directory): the same sharing between imports.
    let base = commit("base", None, vec![layer(&s, &[file("lib/big", &big)])]);
    let child = commit("child", None, vec![base.record.layers[0].clone(), l1]);
    assert_eq!(
        ino(&child.rootfs.join("lib/big")),
        ino(&base.rootfs.join("lib/big"))
    );
    // GC of an image whose files another still links frees only its own.
    s.delete(&t("x"), "base:1").unwrap();
    let in_use: HashSet<Digest> = [one.record.id.clone(), two.record.id.clone()].into();
    s.delete(&t("x"), "one:1").unwrap();
    s.delete(&t("x"), "two:1").unwrap();
    s.delete(&t("x"), "three:1").unwrap();
    let r = s.gc(&in_use).unwrap();
    assert_eq!(r.images_removed, 2, "base and three: {r:?}");
    assert!(
        r.bytes_freed < 1 << 20,
        "the big file lives on in child: {r:?}"
    );
    assert_eq!(fs::read(child.rootfs.join("lib/big")).unwrap(), big);
}
