#!/usr/bin/env python3
"""Builds a small OCI image layout (one gzip layer) for dsec's tests,
optionally corrupted in one way.

    mkoci.py OUTDIR [--tag TAG] [--rootfs-tar FILE] [--corrupt KIND]

--rootfs-tar takes a .tar, .tar.gz or .tar.xz (default: a tiny tree
built here); the layer is stored gzip'd.  Kinds of corruption:

  manifest        the manifest blob changed after it was named by digest
  config          the config blob changed after it was named by digest
  layer           the layer blob changed after it was named by digest
  index-json      index.json is not valid JSON
  manifest-json   the manifest is not valid JSON (but named by its digest)
  layer-size      the manifest's layer descriptor has the wrong size
  diff-id         the config's rootfs.diff_ids does not match the layer
  missing-layer   the layer blob is not in the layout
  digest-path     index.json names the manifest by a digest that is a path
                  (sha256:../../...)

Prints the manifest digest.  Standard library only.
"""

import argparse
import gzip
import hashlib
import io
import json
import lzma
import os
import sys
import tarfile

MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_LAYER_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"
CORRUPTIONS = ("manifest", "config", "layer", "index-json", "manifest-json",
               "layer-size", "diff-id", "missing-layer", "digest-path")


def sha256(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()


def tiny_rootfs():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, data in (("etc", None), ("etc/hostname", b"oci\n"),
                           ("bin", None)):
            ti = tarfile.TarInfo(name)
            ti.mtime = 0
            if data is None:
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                tf.addfile(ti)
            else:
                ti.size, ti.mode = len(data), 0o644
                tf.addfile(ti, io.BytesIO(data))
        ti = tarfile.TarInfo("bin/sh")
        ti.type, ti.linkname, ti.mtime = tarfile.SYMTYPE, "/bin/busybox", 0
        tf.addfile(ti)
    return buf.getvalue()


def read_rootfs(path):
    """(uncompressed tar, gzip'd tar) of a rootfs tarball."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        return gzip.decompress(data), data
    if data[:6] == b"\xfd7zXZ\x00":
        data = lzma.decompress(data)
    return data, gzip.compress(data, mtime=0)


def dumps(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def put_blob(outdir, data, name=None):
    digest = name or sha256(data)
    path = os.path.join(outdir, "blobs", "sha256", digest.split(":", 1)[1])
    with open(path, "wb") as f:
        f.write(data)
    return digest


def build(outdir, tag, rootfs, corrupt):
    if rootfs:
        tar, layer = read_rootfs(rootfs)
    else:
        tar = tiny_rootfs()
        layer = gzip.compress(tar, mtime=0)
    os.makedirs(os.path.join(outdir, "blobs", "sha256"), exist_ok=True)
    with open(os.path.join(outdir, "oci-layout"), "wb") as f:
        f.write(dumps({"imageLayoutVersion": "1.0.0"}))

    diff_id = sha256(tar)
    if corrupt == "diff-id":
        diff_id = sha256(tar + b"\0")
    config = dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": ["PATH=/usr/bin:/bin"], "Cmd": ["/bin/sh"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
    })
    layer_digest = sha256(layer)
    if corrupt != "missing-layer":
        put_blob(outdir, layer)
    config_digest = put_blob(outdir, config)

    layer_size = len(layer) + (1 if corrupt == "layer-size" else 0)
    manifest = dumps({
        "schemaVersion": 2, "mediaType": MT_MANIFEST,
        "config": {"mediaType": MT_CONFIG, "digest": config_digest,
                   "size": len(config)},
        "layers": [{"mediaType": MT_LAYER_GZIP, "digest": layer_digest,
                    "size": layer_size}],
    })
    if corrupt == "manifest-json":
        manifest = manifest[:len(manifest) // 2]
    manifest_digest = put_blob(outdir, manifest)

    entry = {"mediaType": MT_MANIFEST, "digest": manifest_digest,
             "size": len(manifest),
             "annotations": {"org.opencontainers.image.ref.name": tag}}
    if corrupt == "digest-path":
        entry["digest"] = "sha256:../../../../../../../../etc/passwd"
    index = dumps({"schemaVersion": 2, "manifests": [entry]})
    if corrupt == "index-json":
        index = index[:-7]
    with open(os.path.join(outdir, "index.json"), "wb") as f:
        f.write(index)

    # changed after being named: same file name, other bytes
    if corrupt == "manifest":
        put_blob(outdir, manifest.replace(b'"schemaVersion":2',
                                          b'"schemaVersion": 2'),
                 manifest_digest)
    elif corrupt == "config":
        put_blob(outdir, config.replace(b"/bin/sh", b"/bin/xx"), config_digest)
    elif corrupt == "layer":
        data = bytearray(layer)
        data[len(data) // 2] ^= 0xFF
        put_blob(outdir, bytes(data), layer_digest)
    return manifest_digest


def main(argv):
    ap = argparse.ArgumentParser(description="Build a small OCI layout.")
    ap.add_argument("outdir")
    ap.add_argument("--tag", default="latest")
    ap.add_argument("--rootfs-tar")
    ap.add_argument("--corrupt", choices=CORRUPTIONS)
    a = ap.parse_args(argv)
    print(build(a.outdir, a.tag, a.rootfs_tar, a.corrupt))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
