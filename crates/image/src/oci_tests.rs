use super::*;
use crate::layer::tests::{file, symlink, tar_bytes};
use serde_json::json;
use std::collections::HashSet;
use std::fs;

/// Two layers: the second whites out a file of the first and adds a symlink.
pub(crate) fn two_layers() -> Vec<Vec<u8>> {
    let l1 = tar_bytes(&[
        file("etc/keep", b"kept"),
        file("etc/gone", b"whited out"),
        file("bin/hello", b"#!/bin/sh\necho hello\n"),
    ]);
    let l2 = tar_bytes(&[file("etc/.wh.gone", b""), symlink("etc/alias", "keep")]);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &l2).unwrap();
    vec![l1, gz.finish().unwrap()]
}

fn config_json(layers: &[Vec<u8>]) -> Vec<u8> {
    let diff_ids: Vec<String> = layers
        .iter()
        .map(|l| {
            let mut r = crate::digest::HashingReader::new(layer::decompress(&l[..]).unwrap());
            std::io::copy(&mut r, &mut std::io::sink()).unwrap();
            r.finish().unwrap().to_string()
        })
        .collect();
    serde_json::to_vec(&json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/bin", "GREETING=hi"], "WorkingDir": "/etc", "User": "1000",
                   "Entrypoint": ["/bin/sh"], "Cmd": ["-c", "echo"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids}
    }))
    .unwrap()
}

fn add(b: &mut tar::Builder<Vec<u8>>, name: &str, data: &[u8]) {
    let mut h = tar::Header::new_gnu();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, name, data).unwrap();
}

/// An OCI image layout tar.
pub(crate) fn oci_archive(layers: &[Vec<u8>], tamper: bool) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let cfg = config_json(layers);
    let blob = |b: &mut tar::Builder<Vec<u8>>, data: &[u8]| {
        let d = Digest::of_bytes(data);
        add(b, &format!("blobs/sha256/{}", d.hex()), data);
        d
    };
    let cfg_d = blob(&mut b, &cfg);
    let mut descs = Vec::new();
    for (i, l) in layers.iter().enumerate() {
        let d = Digest::of_bytes(l);
        let stored: Vec<u8> = if tamper && i == 1 {
            let mut t = l.clone();
            let mid = t.len() / 2;
            t[mid] ^= 1;
            t
        } else {
            l.clone()
        };
        add(&mut b, &format!("blobs/sha256/{}", d.hex()), &stored);
        descs.push(json!({"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d.to_string(), "size": l.len()}));
    }
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfg_d.to_string(), "size": cfg.len()},
        "layers": descs
    }))
    .unwrap();
    let m_d = blob(&mut b, &manifest);
    add(&mut b, "oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#);
    let index = json!({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": m_d.to_string(),
        "size": manifest.len(), "annotations": {"org.opencontainers.image.ref.name": "demo:1.0"},
        "platform": {"architecture": "amd64", "os": "linux"}}]});
    add(&mut b, "index.json", &serde_json::to_vec(&index).unwrap());
    b.into_inner().unwrap()
}

/// A `docker save` tar (legacy layout, one layer reached through a symlink).
fn docker_archive(layers: &[Vec<u8>]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let cfg = config_json(layers);
    let cfg_name = format!("{}.json", Digest::of_bytes(&cfg).hex());
    add(&mut b, &cfg_name, &cfg);
    add(&mut b, "l0/layer.tar", &layers[0]);
    add(&mut b, "real1/layer.tar", &layers[1]);
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    h.set_mode(0o777);
    b.append_link(&mut h, "l1/layer.tar", "../real1/layer.tar")
        .unwrap();
    let m = json!([{"Config": cfg_name, "RepoTags": ["docker.io/library/demo:2.0"],
                    "Layers": ["l0/layer.tar", "l1/layer.tar"]}]);
    add(&mut b, "manifest.json", &serde_json::to_vec(&m).unwrap());
    b.into_inner().unwrap()
}

fn check_image(img: &Image) {
    let r = &img.rootfs;
    assert_eq!(fs::read(r.join("etc/keep")).unwrap(), b"kept");
    assert!(!r.join("etc/gone").exists(), "whiteout applied");
    assert_eq!(
        fs::read_link(r.join("etc/alias")).unwrap(),
        Path::new("keep")
    );
    let c = &img.record.config;
    assert_eq!(c.get_env("GREETING").as_deref(), Some("hi"));
    assert_eq!(c.working_dir, "/etc");
    assert_eq!(c.user, "1000");
    assert_eq!(c.default_command(), vec!["/bin/sh", "-c", "echo"]);
    assert_eq!(img.record.layers.len(), 2);
}

#[test]
fn imports_an_oci_layout_and_a_docker_save_archive() {
    let tmp = tempfile::tempdir().unwrap();
    let s = ImageStore::open(&tmp.path().join("store")).unwrap();
    let owner = Owner::Tenant("t1".into());
    let layers = two_layers();
    let oci = tmp.path().join("oci.tar");
    fs::write(&oci, oci_archive(&layers, false)).unwrap();
    let img = import(&s, &owner, &oci, None, &ApplyOptions::default()).unwrap();
    check_image(&img);
    assert!(
        s.resolve(&owner, "demo:1.0").is_ok(),
        "named from the annotation"
    );

    let docker = tmp.path().join("docker.tar");
    fs::write(&docker, docker_archive(&layers)).unwrap();
    let img2 = import(&s, &owner, &docker, Some("mine"), &ApplyOptions::default()).unwrap();
    check_image(&img2);
    assert!(s.resolve(&owner, "mine:latest").is_ok());
    // Same layers, stored once.
    assert_eq!(fs::read_dir(s.root().join("layers")).unwrap().count(), 2);
    assert_eq!(img.record.id, img2.record.id);
    // The import's temp files are gone.
    assert_eq!(fs::read_dir(s.root().join("tmp")).unwrap().count(), 0);
    // The record names the operator's file, not where it lies on the host.
    assert_eq!(img2.record.build_log, ["imported from docker.tar"]);
}

#[test]
fn an_uploaded_archive_is_recorded_without_the_daemons_path() {
    let tmp = tempfile::tempdir().unwrap();
    let s = ImageStore::open(&tmp.path().join("store")).unwrap();
    let up = s.temp_dir("upload").unwrap().join("body");
    fs::write(&up, oci_archive(&two_layers(), false)).unwrap();
    let img = import(
        &s,
        &Owner::Tenant("t1".into()),
        &up,
        None,
        &ApplyOptions::default(),
    )
    .unwrap();
    let log = img.record.build_log.join("\n");
    assert_eq!(log, "imported from an uploaded archive");
    assert!(!log.contains(&tmp.path().display().to_string()));
}

#[test]
fn a_tampered_layer_is_refused_by_digest() {
    let tmp = tempfile::tempdir().unwrap();
    let s = ImageStore::open(&tmp.path().join("store")).unwrap();
    let a = tmp.path().join("oci.tar");
    fs::write(&a, oci_archive(&two_layers(), true)).unwrap();
    let e = import(&s, &Owner::Public, &a, Some("x"), &ApplyOptions::default()).unwrap_err();
    assert_eq!(e.code, ErrorCode::IntegrityError, "{}", e.message);
    assert!(s.list(&Owner::Public).unwrap().is_empty());
}

#[test]
fn a_malicious_layer_is_refused_and_nothing_is_left_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let s = ImageStore::open(&tmp.path().join("store")).unwrap();
    let evil = tar_bytes(&[file("ok", b"1"), symlink("esc", "../../../../etc")]);
    let a = tmp.path().join("oci.tar");
    fs::write(&a, oci_archive(&[evil], false)).unwrap();
    let e = import(&s, &Owner::Public, &a, Some("x"), &ApplyOptions::default()).unwrap_err();
    assert!(e.message.contains("\"esc\""), "{}", e.message);
    assert!(s.list(&Owner::Public).unwrap().is_empty());
    for d in fs::read_dir(s.root().join("images")).unwrap() {
        let d = d.unwrap().path();
        assert!(
            !d.join("rootfs").exists(),
            "no rootfs left in {}",
            d.display()
        );
        assert!(
            fs::read_dir(&d).unwrap().all(|e| !e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(".staging")),
            "no staging dir left"
        );
    }
    // GC takes the orphaned layer.
    let r = s.gc(&HashSet::new()).unwrap();
    assert_eq!(r.layers_removed, 1);
}

#[test]
fn an_archive_unpacking_past_the_limit_is_refused_and_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let s = ImageStore::open(&tmp.path().join("store")).unwrap();
    // A gzip bomb as the outer archive: 8 MiB of zeros in a few KiB; its
    // layers (small) would pass the limit, the archive itself does not.
    let mut archive = oci_archive(&two_layers(), false);
    let mut b = tar::Builder::new(Vec::new());
    add(&mut b, "padding", &vec![0u8; 8 << 20]);
    archive.truncate(archive.len() - 1024); // drop the end-of-archive blocks
    archive.extend(b.into_inner().unwrap());
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    std::io::Write::write_all(&mut gz, &archive).unwrap();
    let gz = gz.finish().unwrap();
    assert!(gz.len() < 1 << 20);
    let a = tmp.path().join("bomb.tar.gz");
    fs::write(&a, &gz).unwrap();
    let opts = ApplyOptions {
        max_bytes: 4 << 20,
        ..ApplyOptions::default()
    };
    let e = import(&s, &Owner::Public, &a, Some("x"), &opts).unwrap_err();
    assert_eq!(e.code, ErrorCode::PayloadTooLarge, "{}", e.message);
    assert!(e.message.contains("image archive"), "{}", e.message);
    assert!(s.list(&Owner::Public).unwrap().is_empty());
    assert_eq!(fs::read_dir(s.root().join("tmp")).unwrap().count(), 0);
    // Under a limit it fits, the same archive imports.
    let opts = ApplyOptions {
        max_bytes: 16 << 20,
        ..ApplyOptions::default()
    };
    import(&s, &Owner::Public, &a, Some("x"), &opts).unwrap();
}

#[test]
fn not_an_image_archive() {
    let tmp = tempfile::tempdir().unwrap();
    let s = ImageStore::open(&tmp.path().join("store")).unwrap();
    let a = tmp.path().join("x.tar");
    fs::write(&a, tar_bytes(&[file("hello", b"x")])).unwrap();
    let e = import(&s, &Owner::Public, &a, Some("x"), &ApplyOptions::default()).unwrap_err();
    assert!(e.message.contains("neither an OCI"), "{}", e.message);
    fs::write(&a, b"garbage that is not a tar at all, no no no").unwrap();
    assert!(import(&s, &Owner::Public, &a, Some("x"), &ApplyOptions::default()).is_err());
}

#[test]
fn suggested_names_are_sanitised() {
    assert_eq!(
        name_from_suggestion("docker.io/library/python:3.11").as_deref(),
        Some("python:3.11")
    );
    assert_eq!(name_from_suggestion("demo").as_deref(), Some("demo:latest"));
    assert_eq!(name_from_suggestion("bad name"), None);
}
