#!/usr/bin/env python3
"""Writes the hand-made seeds of the fuzz targets over specs, exec
requests, tar streams, registry manifests, placement inputs and the guest
protocol into tests/fuzz/corpus/{spec,exec-request,tar,registry,place,
guest}/ (seed-* files): valid and invalid inputs, one for each case the
code distinguishes.  The seeds are committed; run this again after
changing it.  Inputs libFuzzer found (sha1 names) and crashes (crash-*)
sit beside them and are left alone."""
import gzip
import io
import json
import lzma
import os
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def j(o):
    return json.dumps(o, separators=(",", ":"))


# ---- spec
full = {
    "backend": "container", "image": "python:3.11",
    "layers": ["task/django-1234@v2"],
    "resources": {"cpus": 1.5, "memory_mb": 1024, "pids": 512,
                  "disk_mb": 2048, "class": "latency"},
    "network": {"mode": "proxy", "allow": ["pypi.org", "*.github.com:443"],
                "deny": ["10.0.0.0/8"]},
    "mounts": [{"source": "/data/task-17", "target": "/task/./x//", "ro": True}],
    "protect": ["/grader/"], "hide": ["/solutions"],
    "env": {"LANG": "C.UTF-8"}, "workdir": "/work//a/.", "user": "1000:1000",
    "ttl_s": 7200, "idle_timeout_s": 900, "idle_action": "suspend",
    "labels": {"job": "grpo-17", "step": 4200}, "name": "sb-one",
    "audit": {"max_bytes": 67108864}, "pmem": False,
}
write("spec", "full", j(full))
write("spec", "minimal", j({"image": "busybox"}))
write("spec", "vm", j({"backend": "vm", "image": "sha256:" + "a" * 64}))
write("spec", "fncall", j({"backend": "fncall", "image": "x",
                           "resources": {"class": "besteffort"}}))
write("spec", "unknown-key", j({"image": "x", "nope": 1}))
write("spec", "dup-key", '{"image":"x","image":"y"}')
write("spec", "dotdot", j({"image": "x", "workdir": "/a/../b"}))
write("spec", "bad-user", j({"image": "x", "user": "70000:1"}))
write("spec", "bad-mount", j({"image": "x", "mounts": [{"source": "rel", "target": "/t"}]}))
write("spec", "mount-flag", "/host/dir:/in/sandbox:ro")
write("spec", "user-flag", "1000:2000")
write("spec", "path-flag", "//a/./b/../c/")
write("spec", "nul", '{"image":"x","workdir":"/a\\u0000b"}')
write("spec", "huge-real", j({"image": "x", "resources": {"pids": 6e40}}))
write("spec", "deny-cidr", j({"image": "x", "network": {"mode": "proxy", "allow": ["[::1]:80"], "deny": ["0.0.0.0/0"]}}))

# ---- exec requests (lines, as a client sends them)
reqs = [
    {"cmd": ["echo", "hi"], "seq": 0},
    {"cmd": ["pytest", "-q"], "stdin": "", "timeout_s": 60, "seq": 1,
     "max_output_bytes": 1048576, "env": {"A": "b"}, "workdir": "/w"},
    {"cmd": ["cat"], "stdin": "data", "seq": 1},
]
write("exec-request", "seq", "\n".join(j(r) for r in reqs) + "\n")
write("exec-request", "session", j({"cmd": ["cd /tmp && ls"], "session": "main", "seq": 5}) + "\n")
write("exec-request", "tty", j({"cmd": ["sh"], "tty": True, "interactive": True, "tty_size": [120, 40]}) + "\n")
write("exec-request", "exclusive", j({"cmd": ["grade"], "exclusive": True, "seq": 9223372036854775806}) + "\n" +
      j({"cmd": ["grade"], "exclusive": True, "seq": 9223372036854775807}) + "\n")
write("exec-request", "bad", "not json\n[1,2]\n{\"cmd\":[]}\n{\"cmd\":[1]}\n"
      "{\"cmd\":[\"x\"],\"env\":{\"A=B\":\"c\"}}\n{\"cmd\":[\"x\"],\"timeout_s\":-1}\n"
      "{\"cmd\":[\"x\"],\"session\":\"bad name\"}\n{\"cmd\":[\"x\"],\"tty_size\":[0,1],\"tty\":true}\n")
write("exec-request", "partial", j({"cmd": ["echo"]}) + "\n" + '{"cmd":["no newline"]')

# ---- tar streams
def tarball(members, fmt=tarfile.PAX_FORMAT):
    b = io.BytesIO()
    with tarfile.open(fileobj=b, mode="w", format=fmt) as t:
        for m, data in members:
            t.addfile(m, io.BytesIO(data) if data is not None else None)
    return b.getvalue()


def member(name, kind=tarfile.REGTYPE, data=b"", mode=0o644, link="", pax=None):
    m = tarfile.TarInfo(name)
    m.type = kind
    m.mode = mode
    m.linkname = link
    if kind == tarfile.REGTYPE:
        m.size = len(data)
    if pax:
        m.pax_headers = pax
    return m, data if kind == tarfile.REGTYPE else None


plain = tarball([member("./", tarfile.DIRTYPE, mode=0o755),
                 member("bin", tarfile.DIRTYPE, mode=0o755),
                 member("bin/sh", data=b"#!/bin/sh\n", mode=0o755),
                 member("bin/sudo", data=b"x", mode=0o4755),
                 member("bin/wall", data=b"x", mode=0o2755),
                 member("bin/link", tarfile.SYMTYPE, link="sh"),
                 member("bin/hard", tarfile.LNKTYPE, link="bin/sh"),
                 member("etc/.wh.passwd"),
                 member("opt/.wh..wh..opq"),
                 member("dev/null", tarfile.CHRTYPE),
                 member("cap", data=b"c", pax={"SCHILY.xattr.security.capability": "\x01\x00\x00\x02"}),
                 member("ovl", tarfile.DIRTYPE, pax={"SCHILY.xattr.trusted.overlay.opaque": "y"})])
write("tar", "plain", plain)
write("tar", "gzip", gzip.compress(plain, mtime=0))
write("tar", "xz", lzma.compress(plain))
write("tar", "gnu", tarball([member("a" * 200, data=b"long")], tarfile.GNU_FORMAT))
write("tar", "escape", tarball([member("../etc/passwd", data=b"x")]))
write("tar", "absolute", tarball([member("/etc/shadow", data=b"x")]))
write("tar", "link-escape", tarball([member("l", tarfile.SYMTYPE, link="/"),
                                     member("l/etc/passwd", data=b"x")]))
write("tar", "protect", tarball([member("grader/run", data=b"x")]))
write("tar", "protect-parent", tarball([member("task", tarfile.SYMTYPE, link="/tmp")]))
write("tar", "truncated", plain[:700])
write("tar", "bzip2", b"BZh91AY&SY" + b"\0" * 32)

# ---- registry: first byte picks the media type and the platform
D = "sha256:" + "ab" * 32
manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": D, "size": 100},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": D, "size": 5},
                       {"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "digest": D, "size": 0}]}
index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
         "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": D, "size": 7,
                        "platform": {"os": "linux", "architecture": "amd64"}},
                       {"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": D, "size": 7,
                        "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}}]}
write("registry", "manifest", b"\x01" + j(manifest).encode())
write("registry", "manifest-notype", b"\x00" + j({k: v for k, v in manifest.items() if k != "mediaType"}).encode())
write("registry", "index", b"\x03" + j(index).encode())
write("registry", "index-arm", b"\x13" + j(index).encode())
write("registry", "bad-digest", b"\x01" + j(dict(manifest, config={"mediaType": "x", "digest": "sha256:zz", "size": 1})).encode())
write("registry", "neg-size", b"\x02" + j(dict(manifest, config={"mediaType": "x", "digest": D, "size": -1})).encode())
write("registry", "ref", b"\x00" + b"registry.example.com:5000/team/app:v1@" + D.encode())
write("registry", "ref-hub", b"\x00busybox")
write("registry", "ref-version", b"\x00task/django-1234@v2")
write("registry", "html", b"\x06<html>not found</html>")

# ---- place: nodes, NUL, requests
node = {"type": "node", "name": "n1", "cpus": 8, "memory_mb": 16384,
        "backends": ["container", "fncall"], "layers": {D: 1000},
        "committed": {"latency": {"cpus": 1, "memory_mb": 1024}, "besteffort": {"cpus": 0, "memory_mb": 0}},
        "labels": {}}
node2 = dict(node, name="n2", labels={"pool": "burst"}, layers={})
reqs = [{"rid": "r1", "count": 3, "spec": {"image": D, "resources": {"cpus": 2, "memory_mb": 2048}}},
        {"rid": "r2", "count": 2, "spread": "g", "spread_max": 1, "spec": {"image": "x", "backend": "vm"}},
        {"rid": "r3", "spec": {"image": "y", "resources": {"class": "besteffort"}}}]
write("place", "plan", "\n".join(j(n) for n in (node, node2)) + "\n\0" + "\n".join(j(r) for r in reqs) + "\n")
write("place", "bad-node", '{"type":"node","name":"n","cpus":-1}\n\0{"rid":"a","spec":{"image":"x"}}\n')
write("place", "bad-request", j(node) + "\n\0" + '{"rid":"a","count":0}\n{"rid":"a","spec":{"image":"x"}}\n')
write("place", "no-requests", j(node) + "\n")
write("place", "huge-real", '{"type":"node","name":"n1","cpus":8,"memory_mb":6e40,'
      '"backends":["container"]}\n\0{"rid":"a","count":-9e40,"spec":{"image":"x"}}\n')

# ---- guest: first byte sets the piece size; then the agent's messages
msgs = (j({"op": "ready"}) + "\n" +
        j({"op": "result", "id": 1, "status": 0, "stdout_len": 3, "stderr_len": 2,
           "stdout_total": 3, "stderr_total": 2}) + "\nouter" +
        j({"op": "output", "id": 2, "stdout_len": 1, "stderr_len": 0}) + "\nx" +
        j({"op": "ckpt", "data_len": 4}) + "\ndata" +
        j({"op": "exec", "argv": ["sh", "-c", "x"], "env": ["A=b"], "cwd": "/", "uid": 1000}) + "\n" +
        "garbage\n")
write("guest", "messages", b"\x00" + msgs.encode())
write("guest", "pieces", b"\x07" + msgs.encode())
write("guest", "negative", b"\x00" + (j({"op": "result", "stdout_len": -1}) + "\n").encode())
write("guest", "too-long", b"\x00" + (j({"op": "result", "data_len": 1 << 40}) + "\n").encode())
# the host's messages, as the agent reads them
hmsgs = (j({"op": "setup", "x": 1}) + "\n" +
         j({"op": "exec", "id": 1, "argv": ["sh"], "env": ["A=b"], "stdin_len": 3}) + "\nabc" +
         j({"op": "stdin", "id": 1, "stdin_len": 2, "eof": True}) + "\nxy" +
         j({"op": "kill", "id": 1, "signal": 9}) + "\n" +
         j({"op": "exec", "id": 2, "stdin_len": -1}) + "\n" +
         j({"op": "exec", "id": 3, "stdin_len": 1 << 40}) + "\n[1,2]\nnot json\n")
write("guest", "host-messages", b"\x00" + hmsgs.encode())
write("guest", "host-pieces", b"\x05" + hmsgs.encode())
write("guest", "partial", b"\x02" + (j({"op": "result", "stdout_len": 100}) + "\nabc").encode())
