#!/bin/sh
# Builds a tiny rootfs tarball from Debian's busybox-static: /bin/busybox,
# a symlink per applet, and the few directories and files a sandbox needs.
#   examples/mkrootfs-busybox.sh OUT.tar[.gz|.zst]
set -eu
out=${1:?usage: mkrootfs-busybox.sh OUT.tar[.gz|.zst]}
bb=/bin/busybox
[ -x "$bb" ] || { echo "mkrootfs-busybox: $bb missing (apt-get install busybox-static)" >&2; exit 1; }

root=$(mktemp -d)
trap 'rm -rf "$root"' EXIT
chmod 755 "$root"
mkdir -p "$root/bin" "$root/sbin" "$root/usr/bin" "$root/usr/sbin" \
  "$root/etc" "$root/tmp" "$root/root" "$root/proc" "$root/sys" "$root/dev" \
  "$root/work" "$root/var/tmp"
chmod 1777 "$root/tmp" "$root/var/tmp"
cp "$bb" "$root/bin/busybox"
for applet in $("$bb" --list); do
  [ "$applet" = busybox ] && continue
  ln -s busybox "$root/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
printf 'dsec\n' >"$root/etc/hostname"

case "$out" in
  *.tar.gz|*.tgz) comp=--gzip ;;
  *.tar.zst) comp=--zstd ;;
  *.tar.xz) comp=--xz ;;
  *) comp= ;;
esac
# numeric owners, sorted, fixed times: the same input gives the same digest
# shellcheck disable=SC2086
tar -C "$root" --numeric-owner --owner=0 --group=0 --sort=name \
  --mtime=@0 $comp -cf "$out" .
