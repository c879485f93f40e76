#!/usr/bin/env python3
"""Crafts malicious or malformed layer tarballs for dsec's bad-input tests.

    mkevil.py OUT CASE [ARG]...

Every tarball starts with a harmless member (etc/hostname) so that the
hostile member is not the first one a reader sees.  Cases:

  valid                        a small, well-formed layer
  file NAME                    a regular file called NAME (`..`, absolute
                               paths, whiteout names)
  whiteout-data                a whiteout (.wh.x) that carries data
  whiteout-dir                 a whiteout (.wh.x) that is a directory
  symlink NAME TARGET          a symlink NAME -> TARGET
  hardlink NAME TARGET         a hardlink NAME to TARGET
  through-symlink TARGET       a symlink `link` -> TARGET, then `link/pwned`
  hardlink-through-symlink T   `link` -> /, then a hardlink `h` to `link/T`
  device chr|blk MAJOR MINOR   a device node dev/node
  mode OCTAL                   bin/tool with mode OCTAL (setuid, setgid)
  caps schily|libarchive       bin/ping with a security.capability xattr
  overlay-xattr NAME VALUE     a directory `a` with the xattr NAME (an
                               overlayfs one: trusted.overlay.redirect ...)
  truncated-member             a member whose header claims more data than
                               the archive holds
  bzip2 | lz4 | lzip | compress
                               unsupported compressions (lz4, lzip and
                               compress are magic bytes followed by junk)
  bomb MIB                     MIB MiB of zeros in one member, gzip'd,
                               generated in chunks
  random | json | empty        not a tarball at all

Option (anywhere): --compress gz|xz writes the tarball compressed.
Standard library only.
"""

import base64
import bz2
import gzip
import io
import lzma
import random
import struct
import sys
import tarfile

MTIME = 0


def info(name, kind=tarfile.REGTYPE, mode=0o644, size=0, **kw):
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.mode = mode
    ti.size = size
    ti.mtime = MTIME
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    for k, v in kw.items():
        setattr(ti, k, v)
    return ti


def add_file(tf, name, data=b"", mode=0o644, **kw):
    tf.addfile(info(name, size=len(data), mode=mode, **kw), io.BytesIO(data))


def add_dir(tf, name, mode=0o755):
    tf.addfile(info(name, tarfile.DIRTYPE, mode=mode))


def add_symlink(tf, name, target):
    tf.addfile(info(name, tarfile.SYMTYPE, mode=0o777, linkname=target))


def add_hardlink(tf, name, target):
    tf.addfile(info(name, tarfile.LNKTYPE, linkname=target))


def harmless(tf):
    add_dir(tf, "etc")
    add_file(tf, "etc/hostname", b"evil\n")


def build(members, fmt=tarfile.GNU_FORMAT):
    """A tar stream (bytes) holding harmless members, then members(tf)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
        harmless(tf)
        members(tf)
    return buf.getvalue()


def cap_v2(permitted):
    """A VFS_CAP_REVISION_2 security.capability value, effective bit set."""
    magic = 0x02000000 | 0x000001  # revision 2 | VFS_CAP_FLAGS_EFFECTIVE
    return struct.pack("<IIIII", magic, permitted & 0xFFFFFFFF, 0,
                       permitted >> 32, 0)


def case_valid(args):
    def m(tf):
        add_dir(tf, "bin")
        add_file(tf, "bin/hello", b"#!/bin/sh\necho hello\n", mode=0o755)
        add_symlink(tf, "bin/sh", "/bin/busybox")
        add_dir(tf, "a")
        add_dir(tf, "a/b")
        add_symlink(tf, "a/b/up", "../../etc")
        add_hardlink(tf, "bin/hello2", "bin/hello")
        add_file(tf, "a/.wh.gone")
    return build(m)


def case_file(args):
    return build(lambda tf: add_file(tf, args[0], b"pwned\n"))


def case_whiteout_data(args):
    return build(lambda tf: add_file(tf, "etc/.wh.x", b"not empty\n"))


def case_whiteout_dir(args):
    return build(lambda tf: add_dir(tf, "etc/.wh.x"))


def case_symlink(args):
    return build(lambda tf: add_symlink(tf, args[0], args[1]))


def case_hardlink(args):
    return build(lambda tf: add_hardlink(tf, args[0], args[1]))


def case_through_symlink(args):
    def m(tf):
        add_symlink(tf, "link", args[0])
        add_file(tf, "link/pwned", b"pwned\n")
    return build(m)


def case_hardlink_through_symlink(args):
    def m(tf):
        add_symlink(tf, "link", "/")
        add_hardlink(tf, "h", "link/" + args[0])
    return build(m)


def case_device(args):
    kind = {"chr": tarfile.CHRTYPE, "blk": tarfile.BLKTYPE}[args[0]]
    return build(lambda tf: tf.addfile(
        info("etc/node", kind, mode=0o666, devmajor=int(args[1]),
             devminor=int(args[2]))))


def case_mode(args):
    mode = int(args[0], 8)
    def m(tf):
        add_dir(tf, "bin")
        add_file(tf, "bin/tool", b"#!/bin/sh\nid\n", mode=mode)
    return build(m)


def case_caps(args):
    value = cap_v2(1 << 13)  # CAP_NET_RAW
    if args[0] == "schily":
        # tarfile writes values that are not UTF-8 with hdrcharset=BINARY
        pax = {"SCHILY.xattr.security.capability":
               value.decode("utf-8", "surrogateescape")}
    else:
        pax = {"LIBARCHIVE.xattr.security.capability":
               base64.b64encode(value).decode().rstrip("=")}

    def m(tf):
        add_dir(tf, "bin")
        data = b"#!/bin/sh\nping\n"
        tf.addfile(info("bin/ping", size=len(data), mode=0o755,
                        pax_headers=pax), io.BytesIO(data))
    return build(m, tarfile.PAX_FORMAT)


def case_overlay_xattr(args):
    pax = {"SCHILY.xattr." + args[0]: args[1]}

    def m(tf):
        tf.addfile(info("a", tarfile.DIRTYPE, mode=0o755, pax_headers=pax))
        add_file(tf, "a/file", b"in a\n")
    return build(m, tarfile.PAX_FORMAT)


def case_truncated_member(args):
    # the header claims 1 MiB; one block of data follows, then the file ends
    return (raw_harmless() +
            info("etc/big", size=1 << 20).tobuf(tarfile.GNU_FORMAT, "utf-8",
                                                "surrogateescape") +
            b"x" * 512)


def case_bzip2(args):
    return bz2.compress(case_valid(args))


def junk_after(magic):
    return magic + bytes(range(256)) * 8


def case_lz4(args):
    return junk_after(b"\x04\x22\x4d\x18")


def case_lzip(args):
    return junk_after(b"LZIP\x01")


def case_compress(args):
    return junk_after(b"\x1f\x9d\x90")


def case_random(args):
    rnd = random.Random(1234)
    data = bytes(rnd.getrandbits(8) for _ in range(64 * 1024))
    return b"R" + data  # no compression magic by chance


def case_json(args):
    return b'{"schemaVersion": 2, "layers": []}\n'


def case_empty(args):
    return b""


def raw_harmless():
    """The harmless members as raw blocks, without an end-of-archive."""
    buf = io.BytesIO()
    tf = tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT)
    harmless(tf)
    data = buf.getvalue()
    tf.fileobj = io.BytesIO()  # keep close() from adding the end blocks
    tf.close()
    return data


def write_bomb(out, mib):
    """A gzip'd tar of one member of mib MiB of zeros, streamed."""
    chunk = bytes(1 << 20)
    with open(out, "wb") as raw, \
            gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1,
                          mtime=0) as gz:
        gz.write(raw_harmless())
        gz.write(info("etc/zeros", size=mib << 20).tobuf(
            tarfile.GNU_FORMAT, "utf-8", "surrogateescape"))
        for _ in range(mib):
            gz.write(chunk)
        gz.write(bytes(1024))


CASES = {
    "valid": case_valid,
    "file": case_file,
    "whiteout-data": case_whiteout_data,
    "whiteout-dir": case_whiteout_dir,
    "symlink": case_symlink,
    "hardlink": case_hardlink,
    "through-symlink": case_through_symlink,
    "hardlink-through-symlink": case_hardlink_through_symlink,
    "device": case_device,
    "mode": case_mode,
    "caps": case_caps,
    "truncated-member": case_truncated_member,
    "bzip2": case_bzip2,
    "lz4": case_lz4,
    "lzip": case_lzip,
    "compress": case_compress,
    "overlay-xattr": case_overlay_xattr,
    "random": case_random,
    "json": case_json,
    "empty": case_empty,
}


def main(argv):
    compress = None
    if "--compress" in argv:
        i = argv.index("--compress")
        compress = argv[i + 1] if i + 1 < len(argv) else ""
        argv = argv[:i] + argv[i + 2:]
    if len(argv) < 2 or (argv[1] not in CASES and argv[1] != "bomb"):
        sys.stderr.write(__doc__)
        return 2
    out, case, args = argv[0], argv[1], argv[2:]
    if case == "bomb":
        write_bomb(out, int(args[0]))
        return 0
    data = CASES[case](args)
    if compress == "gz":
        data = gzip.compress(data, mtime=0)
    elif compress == "xz":
        data = lzma.compress(data, format=lzma.FORMAT_XZ)
    elif compress is not None:
        sys.stderr.write("mkevil: --compress takes gz or xz\n")
        return 2
    with open(out, "wb") as f:
        f.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
