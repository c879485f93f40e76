#!/bin/sh
# A task world (examples/world/spec.json): an agent sandbox and a Redis
# database of its own, on the world's private network.  The agent writes
# through the network by name ("db"), the grader reads the database
# through `exec --service db --exclusive`, a fork gives each child its own
# copy of the data, and rm takes the whole world.  Redis comes from
# Debian's archive (apt-get download, dpkg -x) on the busybox rootfs of
# mkrootfs-busybox.sh; without the archive the example says so and stops.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
[ "$(id -u)" -eq 0 ] || { echo "world: needs root (a world's services join the agent's network)" >&2; exit 77; }
tmp=$(mktemp -d)
chmod 711 "$tmp"
export DSEC_ROOT="$tmp/root" DSEC_RUN="$tmp/run" DSEC_STORE="$tmp/root/store"
trap 'dsec-run ps --all 2>/dev/null | jq -r .id | xargs -r dsec-run rm --force >/dev/null 2>&1 || true; dsec-reap >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT

# the agent's image: busybox; the database's: busybox and Redis
"$here/mkrootfs-busybox.sh" "$tmp/busybox.tar"
dsec-pull --name world-agent:1 "tar:$tmp/busybox.tar" >/dev/null
mkdir "$tmp/debs" "$tmp/db"
if ! (cd "$tmp/debs" && apt-get download -q redis-tools libc6 libstdc++6 \
  libgcc-s1 libatomic1 libjemalloc2 liblzf1 libssl3 libsystemd0 libcap2 \
  libgcrypt20 libgpg-error0 liblz4-1 liblzma5 libzstd1 >/dev/null 2>&1); then
  echo "world: Debian's archive is unreachable (apt-get download); nothing run"
  exit 0
fi
tar -C "$tmp/db" -xf "$tmp/busybox.tar"
for d in "$tmp"/debs/*.deb; do dpkg -x "$d" "$tmp/db"; done
ln -s redis-check-rdb "$tmp/db/usr/bin/redis-server"
mkdir -p "$tmp/db/data"
tar -C "$tmp/db" --numeric-owner -cf "$tmp/db.tar" .
rm -rf "$tmp/db" "$tmp/debs"
dsec-pull --name world-db:1 "tar:$tmp/db.tar" >/dev/null

# the world: returns once the database answers PING (spec.json: Redis
# takes connections before it has loaded its data, and answers LOADING)
w=$(dsec-run create --spec "$here/world/spec.json" | jq -r .id)
# the agent works over the network, by name (busybox nc speaks RESP)
printf 'SET answer 42\r\nQUIT\r\n' >"$tmp/in"
dsec-run exec --stdin "$tmp/in" "$w" -- nc db 6379 | jq -e '.stdout | startswith("+OK")' >/dev/null
# the grader reads the database where the agent cannot reach it
got=$(dsec-run exec --service db --exclusive "$w" -- redis-cli get answer | jq -r .stdout)
[ "$got" = 42 ]
# a fork: the child's database is a copy, its writes stay its own
child=$(dsec-run fork "$w" | jq -r .id)
dsec-run exec "$child" -- sh -c 'printf "SET answer 43\r\nQUIT\r\n" | nc db 6379' >/dev/null
[ "$(dsec-run exec --service db "$child" -- redis-cli get answer | jq -r .stdout)" = 43 ]
[ "$(dsec-run exec --service db "$w" -- redis-cli get answer | jq -r .stdout)" = 42 ]
# one line per world in ps, its services on it
dsec-run ps | jq -c '{id, services: [.services[] | .name + ":" + .state]}'
dsec-run rm "$w" "$child" >/dev/null
[ -z "$(dsec-run ps --all)" ]
echo "world: agent wrote answer=42 to db by name, grader read it with --service; the fork's write stayed in the fork"
