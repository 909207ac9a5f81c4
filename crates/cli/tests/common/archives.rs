//! Archives the image tests make themselves: tars with raw entry names (so
//! malicious ones can be written), a busybox userland in two layers, and an
//! OCI image layout holding layers.

use serde_json::json;
use stasis_image::Digest;

/// One tar entry: (name, kind, data, link target, mode).
pub type E<'a> = (&'a str, tar::EntryType, Vec<u8>, &'a str, u32);

pub fn tar_of(entries: &[E<'_>]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, kind, data, link, mode) in entries {
        let mut h = tar::Header::new_gnu();
        {
            let g = h.as_gnu_mut().unwrap();
            g.name[..name.len()].copy_from_slice(name.as_bytes());
            g.linkname[..link.len()].copy_from_slice(link.as_bytes());
        }
        h.set_entry_type(*kind);
        h.set_size(data.len() as u64);
        h.set_mode(*mode);
        h.set_mtime(1_700_000_000);
        h.set_cksum();
        b.append(&h, &data[..]).unwrap();
    }
    b.into_inner().unwrap()
}

pub fn f<'a>(name: &'a str, data: &[u8], mode: u32) -> E<'a> {
    (name, tar::EntryType::Regular, data.to_vec(), "", mode)
}
pub fn l<'a>(name: &'a str, target: &'a str) -> E<'a> {
    (name, tar::EntryType::Symlink, vec![], target, 0o777)
}

/// Layer 1: busybox and its applets, /etc/passwd, /etc/gone.
/// Layer 2: whites out /etc/gone, adds /etc/motd and a symlink to it.
pub fn layers() -> Vec<Vec<u8>> {
    let bb = std::fs::read("/usr/bin/busybox").expect("busybox (static) on the host");
    let mut l1 = vec![f("bin/busybox", &bb, 0o755)];
    for a in [
        "sh", "cat", "ls", "echo", "test", "id", "pwd", "rm", "mkdir",
    ] {
        l1.push(l(Box::leak(format!("bin/{a}").into_boxed_str()), "busybox"));
    }
    l1.push(f("etc/passwd", b"root:x:0:0:root:/root:/bin/sh\n", 0o644));
    l1.push(f("etc/gone", b"lower layer\n", 0o644));
    let l2 = vec![
        f("etc/.wh.gone", b"", 0o644),
        f("etc/motd", b"from layer two\n", 0o644),
        l("etc/alias", "motd"),
    ];
    vec![tar_of(&l1), tar_of(&l2)]
}

/// An OCI image layout tar holding `layers`.
pub fn oci_archive(layers: &[Vec<u8>]) -> Vec<u8> {
    let diff_ids: Vec<String> = layers
        .iter()
        .map(|l| Digest::of_bytes(l).to_string())
        .collect();
    let cfg = serde_json::to_vec(&json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/bin", "IMG=oci"], "WorkingDir": "/etc", "Cmd": ["/bin/sh"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids}
    }))
    .unwrap();
    let mut blobs: Vec<(Digest, Vec<u8>)> = vec![(Digest::of_bytes(&cfg), cfg.clone())];
    let mut descs = vec![];
    for layer in layers {
        let d = Digest::of_bytes(layer);
        descs.push(json!({"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d.to_string(), "size": layer.len()}));
        blobs.push((d, layer.clone()));
    }
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": blobs[0].0.to_string(), "size": cfg.len()},
        "layers": descs
    }))
    .unwrap();
    let md = Digest::of_bytes(&manifest);
    blobs.push((md.clone(), manifest.clone()));
    let index = serde_json::to_vec(&json!({"schemaVersion": 2, "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": md.to_string(), "size": manifest.len()}]}))
    .unwrap();
    let mut entries: Vec<(String, Vec<u8>)> = blobs
        .into_iter()
        .map(|(d, b)| (format!("blobs/sha256/{}", d.hex()), b))
        .collect();
    entries.push((
        "oci-layout".into(),
        br#"{"imageLayoutVersion":"1.0.0"}"#.to_vec(),
    ));
    entries.push(("index.json".into(), index));
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in entries {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        b.append_data(&mut h, name, &data[..]).unwrap();
    }
    b.into_inner().unwrap()
}

/// Import the busybox image of [`layers`] as `name`; its id.
pub async fn import_busybox(http: &super::Http, name: &str) -> String {
    let r = http
        .raw(
            "POST",
            &format!("/v1/images/import?name={name}"),
            oci_archive(&layers()),
        )
        .await;
    assert_eq!(r.status, 201, "{}", r.body);
    r.body["id"].as_str().unwrap().to_string()
}
