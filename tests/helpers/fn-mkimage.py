#!/usr/bin/env python3
"""Builds test images from a rootfs tarball with the standard library only.

  fn-mkimage.py docker-archive ROOTFS.tar[.gz|...] OUT.tar [REPOTAG]
      a `docker save` style archive: manifest.json, <hex>.json config,
      <id>/layer.tar (uncompressed), RepoTags [REPOTAG] (default bb:1)
  fn-mkimage.py oci ROOTFS.tar[.gz|...] DIR TAG [TAG]...
      an OCI image layout: one image per TAG (the first is the rootfs, each
      further TAG gets an extra small layer so the images differ), each
      named in index.json by org.opencontainers.image.ref.name
  fn-mkimage.py oci-multiarch ROOTFS.tar[.gz|...] DIR TAG
      an OCI image layout whose TAG is an image index of two images,
      linux/amd64 and linux/arm64/v8 (configs differ in architecture)
"""
import gzip
import hashlib
import io
import json
import os
import sys
import tarfile


def raw_tar(path):
    """The uncompressed tar stream of path (any compression tarfile reads)."""
    with tarfile.open(path, "r:*") as src:
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as dst:
            for m in src.getmembers():
                dst.addfile(m, src.extractfile(m) if m.isreg() else None)
        return out.getvalue()


def small_tar(name, content):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as t:
        info = tarfile.TarInfo(name)
        info.size = len(content)
        info.mode = 0o644
        t.addfile(info, io.BytesIO(content))
    return out.getvalue()


def sha(b):
    return hashlib.sha256(b).hexdigest()


def config_for(diff_ids, arch="amd64"):
    return json.dumps({
        "architecture": arch, "os": "linux",
        "config": {"Env": ["PATH=/usr/bin:/bin"], "Cmd": ["/bin/sh", "-c", "echo hi"],
                   "WorkingDir": "/work", "Labels": {"made-by": "fn-mkimage"}},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + d for d in diff_ids]},
    }, sort_keys=True).encode()


def add_bytes(t, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    t.addfile(info, io.BytesIO(data))


def docker_archive(rootfs, out, tag):
    layer = raw_tar(rootfs)
    lid = sha(layer)
    cfg = config_for([lid])
    chex = sha(cfg)
    manifest = [{"Config": chex + ".json", "RepoTags": [tag],
                 "Layers": [lid + "/layer.tar"]}]
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as t:
        add_bytes(t, chex + ".json", cfg)
        add_bytes(t, lid + "/layer.tar", layer)
        add_bytes(t, "manifest.json", json.dumps(manifest).encode())
    print(json.dumps({"config_digest": "sha256:" + chex,
                      "diff_id": "sha256:" + lid}))


def oci(rootfs, d, tags):
    os.makedirs(os.path.join(d, "blobs", "sha256"), exist_ok=True)

    def put(b):
        h = sha(b)
        with open(os.path.join(d, "blobs", "sha256", h), "wb") as f:
            f.write(b)
        return h, len(b)

    base = raw_tar(rootfs)
    base_gz = gzip.compress(base, mtime=0)
    index = {"schemaVersion": 2,
             "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": []}
    out = {}
    for i, tag in enumerate(tags):
        layers = [(base, base_gz)]
        if i > 0:
            extra = small_tar("etc/image-%d" % i, tag.encode())
            layers.append((extra, gzip.compress(extra, mtime=0)))
        descs = []
        for raw, gz in layers:
            h, n = put(gz)
            descs.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                          "digest": "sha256:" + h, "size": n})
        ch, cn = put(config_for([sha(raw) for raw, _ in layers]))
        man = json.dumps({"schemaVersion": 2,
                          "mediaType": "application/vnd.oci.image.manifest.v1+json",
                          "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                     "digest": "sha256:" + ch, "size": cn},
                          "layers": descs}).encode()
        mh, mn = put(man)
        index["manifests"].append({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": "sha256:" + mh, "size": mn,
            "annotations": {"org.opencontainers.image.ref.name": tag}})
        out[tag] = {"manifest": "sha256:" + mh, "config": "sha256:" + ch,
                    "layers": [x["digest"] for x in descs]}
    with open(os.path.join(d, "oci-layout"), "w") as f:
        f.write('{"imageLayoutVersion":"1.0.0"}')
    with open(os.path.join(d, "index.json"), "w") as f:
        json.dump(index, f)
    print(json.dumps(out))


def oci_multiarch(rootfs, d, tag):
    os.makedirs(os.path.join(d, "blobs", "sha256"), exist_ok=True)

    def put(b):
        h = sha(b)
        with open(os.path.join(d, "blobs", "sha256", h), "wb") as f:
            f.write(b)
        return h, len(b)

    base = raw_tar(rootfs)
    lh, ln = put(gzip.compress(base, mtime=0))
    sub = {"schemaVersion": 2,
           "mediaType": "application/vnd.oci.image.index.v1+json",
           "manifests": []}
    out = {"layer": "sha256:" + lh}
    for arch, variant in (("amd64", None), ("arm64", "v8")):
        ch, cn = put(config_for([sha(base)], arch))
        man = json.dumps({"schemaVersion": 2,
                          "mediaType": "application/vnd.oci.image.manifest.v1+json",
                          "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                     "digest": "sha256:" + ch, "size": cn},
                          "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                                      "digest": "sha256:" + lh, "size": ln}]}).encode()
        mh, mn = put(man)
        plat = {"os": "linux", "architecture": arch}
        if variant:
            plat["variant"] = variant
        sub["manifests"].append({"mediaType": "application/vnd.oci.image.manifest.v1+json",
                                 "digest": "sha256:" + mh, "size": mn,
                                 "platform": plat})
        out[arch] = "sha256:" + mh
    ih, in_ = put(json.dumps(sub).encode())
    index = {"schemaVersion": 2,
             "mediaType": "application/vnd.oci.image.index.v1+json",
             "manifests": [{"mediaType": "application/vnd.oci.image.index.v1+json",
                            "digest": "sha256:" + ih, "size": in_,
                            "annotations": {"org.opencontainers.image.ref.name": tag}}]}
    with open(os.path.join(d, "oci-layout"), "w") as f:
        f.write('{"imageLayoutVersion":"1.0.0"}')
    with open(os.path.join(d, "index.json"), "w") as f:
        json.dump(index, f)
    print(json.dumps(out))


def main(argv):
    if len(argv) >= 4 and argv[1] == "docker-archive":
        docker_archive(argv[2], argv[3], argv[4] if len(argv) > 4 else "bb:1")
    elif len(argv) == 5 and argv[1] == "oci-multiarch":
        oci_multiarch(argv[2], argv[3], argv[4])
    elif len(argv) >= 5 and argv[1] == "oci":
        oci(argv[2], argv[3], argv[4:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
