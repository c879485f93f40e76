#!/bin/sh
# Builds the rootfs tarball of tests/worlds.bats' images: the busybox
# rootfs of examples/mkrootfs-busybox.sh (its httpd is the HTTP server)
# plus Redis from Debian's archive (apt-get download, dpkg -x) with the
# libraries it links.  Cached: CACHE/world.tar.gz is reused while the
# package list is the same.
#   tests/helpers/mkworld-image.sh SRCDIR CACHE   (prints the tarball)
# Exit 77: the archive is unreachable.
set -eu
src=${1:?usage: mkworld-image.sh SRCDIR CACHE}
cache=${2:?usage: mkworld-image.sh SRCDIR CACHE}
pkgs="redis-tools libc6 libstdc++6 libgcc-s1 libatomic1 libjemalloc2 liblzf1 libssl3 libsystemd0 \
libcap2 libgcrypt20 libgpg-error0 liblz4-1 liblzma5 libzstd1"
key=$(printf '%s\n' "$pkgs" "$(cat "$0")" | sha256sum | cut -c1-16)
out="$cache/world-$key.tar.gz"
if [ -s "$out" ]; then
  echo "$out"
  exit 0
fi
mkdir -p "$cache"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/debs" "$work/root"
# shellcheck disable=SC2086
if ! (cd "$work/debs" && apt-get download -q $pkgs >/dev/null 2>"$work/apt.err"); then
  cat "$work/apt.err" >&2
  exit 77
fi
"$src/examples/mkrootfs-busybox.sh" "$work/base.tar"
tar -C "$work/root" -xf "$work/base.tar"
for d in "$work"/debs/*.deb; do
  dpkg -x "$d" "$work/root"
done
# Debian's redis-server is redis-tools' redis-check-rdb under another name
ln -sf redis-check-rdb "$work/root/usr/bin/redis-server"
# busybox's usrmerge-less layout: libraries where the loader looks
mkdir -p "$work/root/lib64"
[ -e "$work/root/lib64/ld-linux-x86-64.so.2" ] ||
  ln -s /lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 "$work/root/lib64/ld-linux-x86-64.so.2"
mkdir -p "$work/root/data" "$work/root/www"
echo "hello from web" >"$work/root/www/index.html"
tar -C "$work/root" --numeric-owner --owner=0 --group=0 --sort=name \
  --mtime=@0 --gzip -cf "$out.tmp" .
mv "$out.tmp" "$out"
echo "$out"
