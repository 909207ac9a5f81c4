"""Images through the Python client: import an OCI archive the test makes
(two layers, a whiteout, a symlink, a static busybox), run it, list,
inspect and delete it; a malicious archive is refused."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile

import pytest

from stasis_client import Client, InvalidArgument, NotFound


def _tar(entries: list[tuple[str, bytes | None, str | None, int]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
        for name, data, link, mode in entries:
            info = tarfile.TarInfo(name)
            info.mode = mode
            if link is not None:
                info.type = tarfile.SYMTYPE
                info.linkname = link
                t.addfile(info)
            else:
                info.size = len(data or b"")
                t.addfile(info, io.BytesIO(data or b""))
    return buf.getvalue()


def _digest(b: bytes) -> str:
    return "sha256:" + hashlib.sha256(b).hexdigest()


def oci_archive(layers: list[bytes]) -> bytes:
    cfg = json.dumps(
        {
            "architecture": "amd64",
            "os": "linux",
            "config": {"Env": ["PATH=/bin"], "WorkingDir": "/etc"},
            "rootfs": {"type": "layers", "diff_ids": [_digest(x) for x in layers]},
        }
    ).encode()
    blobs = [cfg, *layers]
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "config": {"digest": _digest(cfg), "size": len(cfg)},
            "layers": [{"digest": _digest(x), "size": len(x)} for x in layers],
        }
    ).encode()
    blobs.append(manifest)
    index = json.dumps({"schemaVersion": 2, "manifests": [{"digest": _digest(manifest), "size": len(manifest)}]})
    entries = [(f"blobs/sha256/{_digest(b)[7:]}", b, None, 0o644) for b in blobs]
    entries += [("oci-layout", b'{"imageLayoutVersion":"1.0.0"}', None, 0o644), ("index.json", index.encode(), None, 0o644)]
    return _tar(entries)


def layers() -> list[bytes]:
    with open("/usr/bin/busybox", "rb") as f:
        bb = f.read()
    l1 = [("bin/busybox", bb, None, 0o755)]
    l1 += [(f"bin/{a}", None, "busybox", 0o777) for a in ("sh", "cat", "test", "mkdir")]
    l1 += [("etc/gone", b"lower\n", None, 0o644)]
    l2 = [("etc/.wh.gone", b"", None, 0o644), ("etc/motd", b"layer two\n", None, 0o644), ("etc/alias", None, "motd", 0o777)]
    return [_tar(l1), _tar(l2)]


def test_import_run_list_inspect_delete(client: Client) -> None:
    info = client.import_image(oci_archive(layers()), name="pymini:1")
    assert info["names"] == ["pymini:1"]
    assert len(info["record"]["layers"]) == 2
    assert any(i["name"] == "pymini" and i["tag"] == "1" for i in client.images())
    assert client.image("pymini:1")["id"] == info["id"]
    with client.create({"backend": "process", "image": "pymini:1"}) as sbx:
        r = sbx.exec("cat /etc/alias; test -e /etc/gone || echo whited-out")
        assert r.stdout == b"layer two\nwhited-out\n", r
    client.delete_image("pymini:1")
    with pytest.raises(NotFound):
        client.image("pymini:1")


def test_a_malicious_archive_is_refused(client: Client) -> None:
    evil = _tar([("../../escape", b"x", None, 0o644)])
    with pytest.raises(InvalidArgument) as e:
        client.import_image(oci_archive([evil]), name="evil")
    assert "../../escape" in str(e.value)
