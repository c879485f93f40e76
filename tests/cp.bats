#!/usr/bin/env bats
# dsec-run cp (and serve's upload and download): files and trees in and out
# of a sandbox, as cp does them; what a copy keeps and strips; that it
# never reaches outside its destination, in the sandbox or on the host;
# its bounds (--disk, --protect); its records (the answer, the trajectory
# and replay by seq, events); and its exit codes.  Container sandboxes but
# for one fncall test and one microvm test.  Every sandbox is removed and
# every background process killed in teardown.

bats_require_minimum_version 1.5.0
load helpers/common
load helpers/run

setup_file() {
  busybox_tar >/dev/null
  run_file_setup
}

teardown_file() {
  sb_file_teardown
}

setup() {
  common_setup
  require_root
  run_setup
  H=$BATS_TEST_TMPDIR/host
  mkdir -p "$H"
}

teardown() {
  sb_teardown
}

# --- helpers of this file -----------------------------------------------------

# sx ID SCRIPT: runs a shell script in sandbox ID; prints its stdout, fails
# (showing its stderr) unless it exits 0.
sx() {
  local res
  res=$(dsec-run exec "$1" -- sh -c "$2") || {
    echo "exec '$2' failed: $res" >&2
    return 1
  }
  jq -r '.stdout' <<<"$res"
}

# What the listings compare: per entry (sorted by path) its path, raw mode
# (kind and permission bits in hex), mtime in seconds; a file's size and
# md5; a link's target.  The same script on the host (coreutils) and in a
# busybox sandbox.
LIST='cd "$1" && find . | LC_ALL=C sort | while IFS= read -r f; do
  if [ -L "$f" ]; then echo "$f $(stat -c "%f %Y" "$f") -> $(readlink "$f")"
  elif [ -f "$f" ]; then echo "$f $(stat -c "%f %Y %s" "$f") $(md5sum <"$f" | cut -c1-32)"
  else echo "$f $(stat -c "%f %Y" "$f")"; fi; done'

host_list() {
  sh -c "$LIST" _ "$1"
}

sb_list() {
  dsec-run exec "$1" -- sh -c "$LIST" _ "$2" | jq -r '.stdout'
}

# same_list WHAT A B: fails showing the difference unless A and B are equal.
same_list() {
  if [ "$2" != "$3" ]; then
    echo "$1 differ:" >&2
    diff <(echo "$2") <(echo "$3") >&2
    return 1
  fi
}

# mktree DIR: a tree with what a copy meets: nested directories of several
# modes, an empty file, one with every byte value, one of 3 MiB + 17 bytes
# (across the stream's 1 MiB chunks), links relative, absolute and
# dangling; mtimes set to the nanosecond.
mktree() {
  local d=$1 i
  mkdir -p "$d/sub/deeper" "$d/empty-dir"
  chmod 0750 "$d/sub"
  chmod 0700 "$d/sub/deeper"
  : >"$d/empty"
  for i in $(seq 0 255); do printf "\\$(printf %03o "$i")"; done >"$d/bytes"
  [ "$(stat -c %s "$d/bytes")" -eq 256 ]
  head -c $((3 * 1024 * 1024 + 17)) /dev/urandom >"$d/sub/big"
  echo 'echo hi' >"$d/sub/deeper/run.sh"
  chmod 0755 "$d/sub/deeper/run.sh"
  chmod 0600 "$d/empty"
  chmod 0640 "$d/bytes"
  ln -s bytes "$d/rel"
  ln -s /etc/hostname "$d/abs"
  ln -s ../nowhere "$d/sub/dangling"
  touch -h -d '2001-02-03 04:05:06.123456789' "$d/bytes" "$d/rel"
  touch -d '1999-12-31 23:59:59.5' "$d/sub/big"
  touch -d '2010-01-01 00:00:00.000000001' "$d/sub/deeper" "$d/sub"
  touch -d '2020-02-02 02:02:02' "$d"
}

# require_vm: QEMU and a guest kernel, or a skip with the reason; in CI
# (CI=true) their absence is a failure (as in tests/dsec-vm.bats).
require_vm() {
  local why=
  command -v qemu-system-x86_64 >/dev/null || why="qemu-system-x86 is not installed"
  compgen -G "/boot/vmlinuz-*" >/dev/null || why="no guest kernel (linux-image-amd64)"
  [ -z "$why" ] && return 0
  if [ "${CI-}" = true ]; then
    echo "$why" >&2
    return 1
  fi
  skip "$why"
}

# --- the command line ----------------------------------------------------------

@test "cp: usage errors (2), a sandbox that is not there (3), a bad path (1)" {
  local id
  id=$(sb_create --name box)
  echo x >"$H/f"
  # both sides or neither side a sandbox
  run -2 --separate-stderr dsec-run cp box:/a box:/b
  [[ $stderr == *"one side is a sandbox's ID:PATH"* ]]
  run -2 --separate-stderr dsec-run cp "$H/f" "$H/g"
  [[ $stderr == *"one side is a sandbox's ID:PATH"* ]]
  # -a is for copies in
  run -2 --separate-stderr dsec-run cp -a box:/etc/passwd "$H/p"
  [[ $stderr == *"-a is for copies in"* ]]
  run -2 --separate-stderr dsec-run cp -a "$id:/etc/passwd" "$H/p"
  # arguments and options
  run -2 --separate-stderr dsec-run cp "$H/f"
  run -2 --separate-stderr dsec-run cp "$H/f" box:/x box:/y
  run -2 --separate-stderr dsec-run cp --seq x "$H/f" box:/x
  run -2 --separate-stderr dsec-run cp --timeout 3 "$H/f" box:/x
  run -2 --separate-stderr dsec-run cp --no-such-option "$H/f" box:/x
  # an ID: prefix that names no sandbox, an empty path after it
  run -3 --separate-stderr dsec-run cp "$H/f" nosuch:/x
  [[ $stderr == *"no sandbox \`nosuch\`"* ]]
  run -3 --separate-stderr dsec-run cp nosuch:/x "$H/g"
  run -3 --separate-stderr dsec-run cp "$H/f" box:
  [[ $stderr == *"give a path after the colon"* ]]
  # a host path with a colon is written ./NAME:X (or with a slash before it)
  echo colon >"$H/a:b"
  run -0 --separate-stderr bash -c "cd '$H' && dsec-run cp ./a:b box:/tmp/"
  [ "$(sx "$id" 'cat /tmp/a:b')" = colon ]
  # a missing source or parent is a failure of the copy (1), said on stderr
  run -1 --separate-stderr dsec-run cp "$H/missing" box:/tmp/
  [[ $stderr == *"No such file or directory"* ]]
  run -1 --separate-stderr dsec-run cp box:/missing "$H/x"
  [[ $stderr == *"cannot read /missing"* ]]
  [ ! -e "$H/x" ]
  # a copy in makes DST's missing parents; one through a file cannot
  run -0 --separate-stderr dsec-run cp "$H/f" box:/no/such/dir/f
  [ "$(sx "$id" 'cat /no/such/dir/f; stat -c %a /no/such/dir')" = "$(cat "$H/f")
755" ]
  run -1 --separate-stderr dsec-run cp "$H/f" box:/etc/passwd/dir/f
  [[ $stderr == *"/etc/passwd"* ]]
  run -1 --separate-stderr dsec-run cp box:/etc/passwd "$H/no/such/p"
  [[ $stderr == *"No such file or directory"* ]]
  [ ! -e "$H/no" ]
  [ -z "$output" ]
}

@test "cp: a copy out that fails on the host is no record and no event" {
  local id
  id=$(sb_create)
  run -1 --separate-stderr dsec-run cp "$id:/etc/passwd" "$H/no/such/p"
  [ ! -e "$H/no" ]
  dsec-run trajectory "$id" | jq -se 'map(select(.type == "copy")) == []'
  dsec-run events "$id" | jq -se 'map(select(.type == "copy")) == []'
}

# --- copies, both ways ---------------------------------------------------------

@test "cp: a tree in and out again, binary-exact, modes, mtimes and links kept; the answer's fields" {
  local id digest_in bytes
  id=$(sb_create)
  mktree "$H/src"
  bytes=$((256 + 3 * 1024 * 1024 + 17 + 8))
  run -0 --separate-stderr dsec-run cp "$H/src" "$id:/work/"
  out_jq --arg id "$id" --argjson b "$bytes" '.type == "copied" and .id == $id and
    .seq == null and .direction == "in" and .path == "/work/" and
    .bytes == $b and .files == 4 and (.digest | test("^sha256:[0-9a-f]{64}$")) and
    (.duration_ms | type == "number") and .replayed == false and .skipped == 0'
  digest_in=$(jq -r .digest <<<"$output")
  # in the sandbox: the same tree, made by its root
  same_list "host and sandbox trees" "$(host_list "$H/src")" "$(sb_list "$id" /work/src)"
  [ "$(sx "$id" 'stat -c %u:%g /work/src /work/src/sub/big /work/src/rel | sort -u')" = 0:0 ]
  # and out again: the same tree on the host, file by file
  run -0 --separate-stderr dsec-run cp "$id:/work/src" "$H/back"
  out_jq --arg d "$digest_in" --argjson b "$bytes" '.direction == "out" and
    .path == "/work/src" and .bytes == $b and .files == 4 and .digest == $d and
    .replayed == false and (has("skipped") | not)'
  same_list "host trees" "$(host_list "$H/src")" "$(host_list "$H/back")"
  cmp "$H/src/bytes" "$H/back/bytes"
  cmp "$H/src/empty" "$H/back/empty"
  cmp "$H/src/sub/big" "$H/back/sub/big"
  [ "$(readlink "$H/back/rel")" = bytes ]
  [ "$(readlink "$H/back/abs")" = /etc/hostname ]
  [ "$(stat -c %y "$H/back/bytes")" = "$(stat -c %y "$H/src/bytes")" ]
  [ "$(stat -c %y "$H/back/rel")" = "$(stat -c %y "$H/src/rel")" ]
  [ "$(stat -c %y "$H/back/sub")" = "$(stat -c %y "$H/src/sub")" ]
  # the same tree in again: the same digest
  run -0 --separate-stderr dsec-run cp "$H/src" "$id:/tmp/again"
  out_jq --arg d "$digest_in" '.digest == $d and .path == "/tmp/again"'
  same_list "host and sandbox trees" "$(host_list "$H/src")" "$(sb_list "$id" /tmp/again)"
}

@test "cp: into a directory, to a new name, the contents of a tree (SRC/.), both ways" {
  local id
  id=$(sb_create)
  mkdir -p "$H/t/d"
  echo one >"$H/t/one"
  echo two >"$H/t/d/two"
  # a file into a directory, and as a new name
  dsec-run cp "$H/t/one" "$id:/work" >/dev/null
  dsec-run cp "$H/t/one" "$id:/work/renamed" >/dev/null
  [ "$(sx "$id" 'cat /work/one /work/renamed')" = "$(printf 'one\none')" ]
  # a tree as a new name; its contents into a directory that has files
  dsec-run cp "$H/t" "$id:/work/tree" >/dev/null
  [ "$(sx "$id" 'cat /work/tree/one /work/tree/d/two')" = "$(printf 'one\ntwo')" ]
  sx "$id" 'mkdir /work/merge && echo kept > /work/merge/kept && echo old > /work/merge/one'
  run -0 --separate-stderr dsec-run cp "$H/t/." "$id:/work/merge"
  out_jq '.files == 2'
  [ "$(sx "$id" 'ls /work/merge | tr "\n" " "')" = "d kept one " ]
  [ "$(sx "$id" 'cat /work/merge/kept /work/merge/one /work/merge/d/two')" = "$(printf 'kept\none\ntwo')" ]
  # the contents of a file is an error
  run -1 --separate-stderr dsec-run cp "$H/t/one/." "$id:/work/x"
  [[ $stderr == *"Not a directory"* ]]
  # out: into a directory, as a new name, the contents
  mkdir "$H/into" "$H/merged"
  echo kept >"$H/merged/kept"
  dsec-run cp "$id:/work/tree" "$H/into" >/dev/null
  dsec-run cp "$id:/work/tree" "$H/new" >/dev/null
  dsec-run cp "$id:/work/tree/." "$H/merged" >/dev/null
  dsec-run cp "$id:/work/one" "$H/into/" >/dev/null
  dsec-run cp "$id:/work/one" "$H/file-renamed" >/dev/null
  same_list "copies out" "$(host_list "$H/t")" "$(host_list "$H/into/tree")"
  same_list "copies out" "$(host_list "$H/t")" "$(host_list "$H/new")"
  [ "$(ls "$H/merged" | tr '\n' ' ')" = "d kept one " ]
  [ "$(cat "$H/into/one" "$H/file-renamed")" = "$(printf 'one\none')" ]
  # a directory over a file is refused, and the file stays
  sx "$id" 'echo file > /work/clash'
  run -1 --separate-stderr dsec-run cp "$H/t" "$id:/work/clash"
  [[ $stderr == *"something else is there"* ]]
  [ "$(sx "$id" 'cat /work/clash')" = file ]
}

@test "cp: an existing file is replaced whole, by a rename; a link in the way of a file is replaced, not followed" {
  local id
  id=$(sb_create)
  echo short >"$H/f"
  sx "$id" 'echo "a longer old content" > /work/f; ln /work/f /work/hard; ln -s /etc/passwd /work/p'
  passwd=$(sx "$id" 'cat /etc/passwd')
  dsec-run cp "$H/f" "$id:/work/f" >/dev/null
  [ "$(sx "$id" 'cat /work/f')" = short ]
  # written beside and renamed over: another name of the old file keeps it
  [ "$(sx "$id" 'cat /work/hard')" = "a longer old content" ]
  dsec-run cp "$H/f" "$id:/work/p" >/dev/null
  [ "$(sx "$id" '[ -L /work/p ] && echo link; cat /work/p')" = short ]
  [ "$(sx "$id" 'cat /etc/passwd')" = "$passwd" ]
  [ -z "$(sx "$id" 'ls -a /work | grep dsec-cp || true')" ]
  # the same on the host
  echo "a longer old content" >"$H/out"
  ln "$H/out" "$H/out-hard"
  echo canary >"$H/canary"
  ln -s "$H/canary" "$H/link"
  dsec-run cp "$id:/work/f" "$H/out" >/dev/null
  dsec-run cp "$id:/work/f" "$H/link" >/dev/null
  [ "$(cat "$H/out")" = short ]
  [ "$(cat "$H/out-hard")" = "a longer old content" ]
  [ ! -L "$H/link" ] && [ "$(cat "$H/link")" = short ]
  [ "$(cat "$H/canary")" = canary ]
}

@test "cp: SRC itself is not followed unless written SRC/; links below it never are" {
  local id
  id=$(sb_create)
  mkdir -p "$H/dir"
  echo in >"$H/dir/f"
  ln -s dir "$H/L"
  dsec-run cp "$H/L" "$id:/work/" >/dev/null
  [ "$(sx "$id" 'readlink /work/L')" = dir ]
  dsec-run cp "$H/L/" "$id:/work/L2" >/dev/null
  [ "$(sx "$id" '[ -d /work/L2 ] && [ ! -L /work/L2 ] && cat /work/L2/f')" = in ]
  # out
  sx "$id" 'ln -s /work/L2 /work/l; mkdir /work/t; ln -s /work/L2 /work/t/l'
  dsec-run cp "$id:/work/l" "$H/l" >/dev/null
  [ "$(readlink "$H/l")" = /work/L2 ]
  dsec-run cp "$id:/work/l/" "$H/l2" >/dev/null
  [ -d "$H/l2" ] && [ ! -L "$H/l2" ] && [ "$(cat "$H/l2/f")" = in ]
  dsec-run cp "$id:/work/t" "$H/t" >/dev/null
  [ "$(readlink "$H/t/l")" = /work/L2 ]
}

# --- owners and set-id bits ------------------------------------------------------

@test "cp: setuid and setgid are stripped on a copy in without -a, and on every copy out" {
  local id
  id=$(sb_create)
  echo s >"$H/suid"
  chmod 6755 "$H/suid"
  mkdir "$H/sticky"
  chmod 1777 "$H/sticky"
  dsec-run cp "$H/suid" "$id:/work/" >/dev/null
  dsec-run cp "$H/sticky" "$id:/work/" >/dev/null
  [ "$(sx "$id" 'stat -c %a /work/suid /work/sticky')" = "$(printf '755\n777')" ]
  # made set-id in the sandbox (no read-write mount: allowed), it comes
  # out without
  sx "$id" 'chmod 4755 /work/suid; chmod 2750 /work/sticky; stat -c %a /work/suid' | grep -qx 4755
  dsec-run cp "$id:/work/suid" "$H/out" >/dev/null
  dsec-run cp "$id:/work/sticky" "$H/out-dir" >/dev/null
  [ "$(stat -c %a "$H/out")" = 755 ]
  [ "$(stat -c %a "$H/out-dir")" = 750 ]
  [ -z "$(find "$H/out" "$H/out-dir" -perm /7000)" ]
}

@test "cp -a keeps owners, setuid, setgid and sticky; without it files are the spec user's (--user 1000:1000)" {
  local id
  id=$(sb_create --user 1000:1000)
  mkdir -p "$H/own/sticky"
  echo s >"$H/own/suid"
  echo p >"$H/own/plain"
  chown -R 1234:2345 "$H/own"
  chmod 6755 "$H/own/suid" # after chown, which clears them
  chmod 1777 "$H/own/sticky"
  run -0 --separate-stderr dsec-run cp "$H/own" "$id:/tmp/"
  [ "$(sx "$id" 'cd /tmp/own && stat -c "%n %u:%g %a" . suid plain sticky')" = \
    "$(printf '%s\n' ". 1000:1000 755" "suid 1000:1000 755" "plain 1000:1000 644" "sticky 1000:1000 777")" ]
  run -0 --separate-stderr dsec-run cp -a "$H/own" "$id:/tmp/own-a"
  [ "$(sx "$id" 'cd /tmp/own-a && stat -c "%n %u:%g %a" . suid plain sticky')" = \
    "$(printf '%s\n' ". 1234:2345 755" "suid 1234:2345 6755" "plain 1234:2345 644" "sticky 1234:2345 1777")" ]
  # the request records -a
  dsec-run trajectory "$id" | jq -se 'map(select(.type == "copy") | .request.archive) == [false, true]'
  # what comes out is the caller's, whoever owned it in the sandbox
  dsec-run cp "$id:/tmp/own-a" "$H/back" >/dev/null
  [ "$(find "$H/back" -printf '%U:%G\n' | sort -u)" = 0:0 ]
  [ -z "$(find "$H/back" -perm /7000)" ]
}

# --- hostile sandboxes -------------------------------------------------------------

@test "cp: a link the sandbox planted in the way of a copy in is refused; nothing is written where it points" {
  local id before
  id=$(sb_create)
  mkdir -p "$H/outside" "$H/src/sub" "$H/src/zz"
  echo canary >"$H/outside/canary"
  echo x >"$H/src/sub/x"
  echo z >"$H/src/zz/z"
  before=$(sb_list "$id" /etc)
  # to a host path (which the sandbox cannot see), and to its /etc
  sx "$id" "mkdir -p /work/d/src /work/e/src; ln -s '$H/outside' /work/d/src/sub; ln -s /etc /work/e/src/zz"
  run -1 --separate-stderr dsec-run cp "$H/src" "$id:/work/d/"
  [[ $stderr == *sub* ]] && [[ $stderr =~ (something\ else\ is\ there|in\ the\ way) ]]
  run -1 --separate-stderr dsec-run cp "$H/src" "$id:/work/e/"
  [[ $stderr == *zz* ]] && [[ $stderr =~ (something\ else\ is\ there|in\ the\ way) ]]
  # the links are still links, nothing went through them
  [ "$(sx "$id" 'readlink /work/d/src/sub; readlink /work/e/src/zz')" = "$(printf '%s\n' "$H/outside" /etc)" ]
  [ "$(ls -A "$H/outside")" = canary ]
  [ "$(cat "$H/outside/canary")" = canary ]
  same_list "the sandbox's /etc before and after" "$before" "$(sb_list "$id" /etc)"
  # and a failed copy is no record
  dsec-run trajectory "$id" | jq -se 'map(select(.type == "copy")) == []'
  dsec-run events "$id" | jq -se 'map(select(.type == "copy")) == []'
}

@test "cp: a copy out of a tree holding links to /etc: links on the host, nothing of the host's /etc read" {
  local id
  id=$(sb_create)
  sx "$id" 'mkdir /work/t; echo hi > /work/t/f; ln -s /etc /work/t/etc; ln -s /etc/shadow /work/t/shadow; ln -s ../../../../etc/passwd /work/t/up'
  run -0 --separate-stderr dsec-run cp "$id:/work/t" "$H/"
  # 3 bytes of data: only f's
  out_jq '.bytes == 3 and .files == 1'
  [ "$(readlink "$H/t/etc")" = /etc ]
  [ "$(readlink "$H/t/shadow")" = /etc/shadow ]
  [ "$(readlink "$H/t/up")" = ../../../../etc/passwd ]
  [ -L "$H/t/etc" ] && [ -L "$H/t/shadow" ] && [ -L "$H/t/up" ]
  [ "$(find "$H/t" -type f | wc -l)" -eq 1 ]
}

@test "cp: a copy out never goes through a link an earlier copy out left on the host" {
  local id
  id=$(sb_create)
  mkdir "$H/outside" "$H/dst"
  echo canary >"$H/outside/canary"
  sx "$id" "mkdir /work/t; ln -s '$H/outside' /work/t/x"
  dsec-run cp "$id:/work/t" "$H/dst/" >/dev/null
  [ "$(readlink "$H/dst/t/x")" = "$H/outside" ]
  # the sandbox now makes x a directory with a file, and the same copy
  # would write that file through the host's link
  sx "$id" 'rm /work/t/x; mkdir /work/t/x; echo pwned > /work/t/x/canary; echo pwned > /work/t/x/new'
  run -1 --separate-stderr dsec-run cp "$id:/work/t" "$H/dst/"
  [[ $stderr == *x* ]] && [[ $stderr =~ (something\ else\ is\ there|in\ the\ way) ]]
  [ "$(ls -A "$H/outside")" = canary ]
  [ "$(cat "$H/outside/canary")" = canary ]
  [ -z "$(find "$H/dst" -name '.dsec-cp.*')" ]
}

@test "cp: fifos and devices in the source are skipped and counted; a device as the source is refused" {
  local id
  id=$(sb_create)
  mkdir "$H/src"
  echo f >"$H/src/f"
  mkfifo "$H/src/fifo"
  mknod "$H/src/null" c 1 3
  run -0 --separate-stderr dsec-run cp "$H/src" "$id:/work/"
  out_jq '.skipped == 2 and .files == 1'
  [ "$(sx "$id" 'ls -A /work/src')" = f ]
  # out: a fifo the sandbox made is left out, a device refused
  sx "$id" 'mkfifo /work/src/pipe'
  dsec-run cp "$id:/work/src" "$H/back" >/dev/null
  [ "$(ls -A "$H/back")" = f ]
  run -1 --separate-stderr dsec-run cp "$id:/dev/null" "$H/null"
  [[ $stderr == *"neither a directory, a regular file nor a link"* ]]
  [ ! -e "$H/null" ]
  run -1 --separate-stderr dsec-run cp "$H/src/fifo" "$id:/work/fifo"
  [[ $stderr == *"neither a directory, a regular file nor a link"* ]]
}

# --- bounds -----------------------------------------------------------------------

@test "cp: a copy out is bounded by the sandbox's disk limit while a process in it keeps writing the file" {
  local id
  id=$(sb_create --disk 64)
  # the file reads as far more than --disk holds (a hole of 96 MiB, then
  # what the writer appends until the disk is full, and on): the bound is
  # on what the copy reads, not on the file's size when it starts
  sx "$id" 'truncate -s 96M /work/f; (while :; do cat /dev/zero; sleep 0.1; done >> /work/f) </dev/null >/dev/null 2>&1 &'
  for _ in $(seq 100); do
    [ "$(sx "$id" 'du -k /work/f | cut -f1')" -gt 1024 ] && break
    sleep 0.1
  done
  [ "$(sx "$id" 'du -k /work/f | cut -f1')" -gt 1024 ]
  run -1 --separate-stderr dsec-run cp "$id:/work/f" "$H/f"
  [[ $stderr == *"larger than the sandbox's disk limit"* ]]
  # nothing is left on the host (the copy's temporary file is gone)
  [ -z "$(ls -A "$H")" ]
  # the sandbox goes on; the writer is killed
  sx "$id" 'true'
  dsec-run kill "$id" KILL >/dev/null
  sb_wait_no_proc "$id" sh
  dsec-run events "$id" | jq -se 'map(select(.type == "copy")) | length == 0'
}

@test "cp: a copy in is bounded by --disk (no space left), and leaves no partial file" {
  local id
  id=$(sb_create --disk 64)
  truncate -s 100M "$H/big"
  run -1 --separate-stderr dsec-run cp "$H/big" "$id:/work/"
  [[ $stderr == *"No space left on device"* ]]
  [ -z "$(sx "$id" 'ls -A /work')" ]
  # the space is free again
  [ "$(sx "$id" 'df -k / | tail -1' | awk '{print $3}')" -lt 10240 ]
  echo small >"$H/small"
  dsec-run cp "$H/small" "$id:/work/" >/dev/null
  [ "$(sx "$id" 'cat /work/small')" = small ]
}

@test "cp: --protect refuses a copy into a protected path; a copy out of it works" {
  local id before
  id=$(sb_create --protect /etc)
  echo new >"$H/passwd"
  before=$(sb_list "$id" /etc)
  run -1 --separate-stderr dsec-run cp "$H/passwd" "$id:/etc/passwd"
  [[ $stderr == *"Read-only file system"* ]]
  run -1 --separate-stderr dsec-run cp "$H/passwd" "$id:/etc/"
  run -1 --separate-stderr dsec-run cp -a "$H/passwd" "$id:/etc/new"
  mkdir "$H/d"
  run -1 --separate-stderr dsec-run cp "$H/d" "$id:/etc/"
  same_list "the protected /etc before and after" "$before" "$(sb_list "$id" /etc)"
  dsec-run cp "$id:/etc/passwd" "$H/out" >/dev/null
  [ "$(cat "$H/out")" = "$(sx "$id" 'cat /etc/passwd')" ]
}

@test "cp: a suspended sandbox takes no copy until it is resumed" {
  local id
  id=$(sb_create)
  echo f >"$H/f"
  dsec-run suspend "$id" >/dev/null
  run --separate-stderr dsec-run cp "$H/f" "$id:/work/"
  [ "$status" -ne 0 ]
  [[ $stderr == *suspended* ]]
  dsec-run resume "$id" >/dev/null
  dsec-run cp "$H/f" "$id:/work/" >/dev/null
  [ "$(sx "$id" 'cat /work/f')" = f ]
}

@test "cp: a copy out of a suspended sandbox is refused, not left waiting" {
  local id
  id=$(sb_create)
  dsec-run suspend "$id" >/dev/null
  # (the bound only stops the hang; the answer takes milliseconds)
  run --separate-stderr timeout 20 dsec-run cp "$id:/etc/passwd" "$H/p"
  [ "$status" -ne 124 ] && [ "$status" -ne 0 ]
  [[ $stderr == *suspended* ]]
  [ ! -e "$H/p" ]
  run --separate-stderr timeout 20 dsec-run serve <<EOF
{"op":"download","rid":1,"id":"$id","src":"/etc/passwd","dst":"$H/p"}
EOF
  [ "$status" -eq 0 ]
  out_jq '.rid == 1 and .type == "error"'
}

@test "cp: a copy refused because the sandbox is suspended exits 1, as cp's failures do" {
  local id
  id=$(sb_create)
  echo f >"$H/f"
  dsec-run suspend "$id" >/dev/null
  run -1 --separate-stderr dsec-run cp "$H/f" "$id:/work/"
}

# --- records -------------------------------------------------------------------------

@test "cp --seq: a copy in at a recorded seq with the same tree is replayed and writes nothing; another is a conflict (4)" {
  local id digest
  id=$(sb_create)
  mkdir "$H/src"
  echo one >"$H/src/a"
  run -0 --separate-stderr dsec-run cp --seq 0 "$H/src" "$id:/work/"
  out_jq '.seq == 0 and .replayed == false'
  digest=$(jq -r .digest <<<"$output")
  sx "$id" 'echo changed in the sandbox > /work/src/a'
  run -0 --separate-stderr dsec-run cp --seq 0 "$H/src" "$id:/work/"
  out_jq --arg d "$digest" '.seq == 0 and .replayed == true and .digest == $d and .direction == "in"'
  # replayed, not made again
  [ "$(sx "$id" 'cat /work/src/a')" = "changed in the sandbox" ]
  # another tree at the same seq, another destination, an exec
  echo two >"$H/src/a"
  run -4 --separate-stderr dsec-run cp --seq 0 "$H/src" "$id:/work/"
  [[ $stderr == *"seq 0 differs from the recorded copy (digest)"* ]]
  echo one >"$H/src/a"
  run -4 --separate-stderr dsec-run cp --seq 0 "$H/src" "$id:/tmp/"
  [[ $stderr == *"(dst)"* ]]
  run -4 --separate-stderr dsec-run cp -a --seq 0 "$H/src" "$id:/work/"
  [[ $stderr == *"(archive)"* ]]
  run -4 --separate-stderr dsec-run exec --seq 0 "$id" -- true
  [ "$(sx "$id" 'cat /work/src/a')" = "changed in the sandbox" ]
  # a seq beyond the next is refused too
  run -4 --separate-stderr dsec-run cp --seq 5 "$H/src" "$id:/work/"
  # the record and the events
  dsec-run trajectory "$id" | jq -se --arg d "$digest" 'map(select(.seq == 0)) |
    length == 1 and .[0].type == "copy" and
    .[0].request == {"op":"upload","dst":"/work/","archive":false,"seq":0} and
    .[0].result.type == "copied" and .[0].result.digest == $d and
    .[0].result.replayed == false'
  dsec-run events "$id" | jq -se --arg d "$digest" '
    (map(select(.type == "copy")) | length == 1 and .[0].seq == 0 and
      .[0].direction == "in" and .[0].path == "/work/" and .[0].bytes == 4 and
      .[0].files == 1 and .[0].digest == $d) and
    (map(select(.type == "replay" and .seq == 0)) | length == 1) and
    (map(select(.type == "replay_conflict") | .field) | sort == ["archive", "digest", "dst", "op"])'
}

@test "cp --seq: a copy out at a recorded seq copies again and answers replayed" {
  local id
  id=$(sb_create)
  sx "$id" 'echo out > /work/f'
  run -0 --separate-stderr dsec-run cp --seq 0 "$id:/work/f" "$H/f"
  out_jq '.seq == 0 and .replayed == false and .direction == "out"'
  rm "$H/f"
  run -0 --separate-stderr dsec-run cp --seq 0 "$id:/work/f" "$H/f"
  out_jq '.seq == 0 and .replayed == true'
  [ "$(cat "$H/f")" = out ]
  run -4 --separate-stderr dsec-run cp --seq 0 "$id:/work/other" "$H/f"
  [[ $stderr == *"(src)"* ]]
  # one record; two copy events (both copies ran)
  dsec-run trajectory "$id" | jq -se 'map(select(.type == "copy")) |
    length == 1 and .[0].request == {"op":"download","src":"/work/f","seq":0}'
  dsec-run events "$id" | jq -se 'map(select(.type == "copy" and .direction == "out")) | length == 2'
  # the next seq is 1, for an exec as for a copy
  run -0 --separate-stderr dsec-run exec --seq 1 "$id" -- true
}

@test "serve: upload and download, answered with their rid; errors too" {
  local id
  id=$(sb_create --name box)
  mkdir "$H/src"
  echo up >"$H/src/f"
  run -0 --separate-stderr dsec-run serve <<EOF
{"op":"upload","rid":"u","id":"box","src":"$H/src","dst":"/work/","seq":0}
EOF
  out_jq --arg id "$id" '.rid == "u" and .type == "copied" and .id == $id and
    .direction == "in" and .seq == 0 and .files == 1 and .skipped == 0'
  run -0 --separate-stderr dsec-run serve <<EOF
{"op":"download","rid":"d","id":"box","src":"/work/src","dst":"$H/back","seq":1}
{"op":"upload","rid":"a","id":"box","src":"$H/src/f","dst":"/work/f-a","archive":true}
{"op":"upload","rid":"e1","id":"box","src":"$H/src"}
{"op":"upload","rid":"e2","id":"nosuch","src":"$H/src","dst":"/x"}
{"op":"download","rid":"e3","id":"box","src":"/missing","dst":"$H/missing"}
{"op":"upload","rid":"e4","id":"box","src":"$H/src","dst":"/work/","seq":"0"}
{"op":"upload","rid":"r","id":"box","src":"$H/src","dst":"/work/","seq":0}
EOF
  [ "$(wc -l <<<"$output")" -eq 7 ]
  jq -e -s 'map(select(.rid == "d"))[0] | .type == "copied" and .direction == "out" and .seq == 1' <<<"$output"
  jq -e -s 'map(select(.rid == "a"))[0] | .type == "copied" and .path == "/work/f-a"' <<<"$output"
  jq -e -s 'map(select(.rid == "e1"))[0] | .type == "error" and .exit_code == 3' <<<"$output"
  jq -e -s 'map(select(.rid == "e2"))[0] | .type == "error" and .exit_code == 3' <<<"$output"
  jq -e -s 'map(select(.rid == "e3"))[0] | .type == "error" and .exit_code == 1' <<<"$output"
  jq -e -s 'map(select(.rid == "e4"))[0] | .type == "error" and .exit_code == 3' <<<"$output"
  jq -e -s 'map(select(.rid == "r"))[0] | .type == "copied" and .replayed == true' <<<"$output"
  [ "$(cat "$H/back/f")" = up ]
  [ "$(sx "$id" 'cat /work/f-a')" = up ]
  [ ! -e "$H/missing" ]
  dsec-run trajectory "$id" | jq -se 'map(select(.type == "copy") | .request.op) | sort ==
    ["download", "upload", "upload"]'
}

@test "cp: a client that stops reading a copy out does not hold up the sandbox's other requests" {
  local id
  id=$(sb_create)
  sx "$id" 'head -c 67108864 /dev/zero > /work/big'
  # a client (as a dsec-run cp that was stopped, ^Z) that asks for the
  # download, reads its first byte, then nothing more
  bg python3 -c '
import array, os, socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
r, w = os.pipe()
s.sendmsg([b"{\"op\":\"download\",\"src\":\"/work/big\"}\n"],
          [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [w]).tobytes())])
os.close(w)
os.read(r, 1)
print("stopped reading", flush=True)
time.sleep(3600)' "$DSEC_RUN/$id/ctl.sock" >"$BATS_TEST_TMPDIR/client.out"
  for _ in $(seq 100); do
    grep -q 'stopped reading' "$BATS_TEST_TMPDIR/client.out" && break
    sleep 0.1
  done
  grep -q 'stopped reading' "$BATS_TEST_TMPDIR/client.out"
  # an exec answers as usual (in ms; 20 s is only a bound for the hang)
  run -0 --separate-stderr timeout 20 dsec-run exec "$id" -- echo alive
  out_jq '.stdout == "alive\n"'
}

# --- other backends -----------------------------------------------------------------

@test "cp: fncall: a copy in fails on the read-only root and works into a read-write mount; copies out work" {
  local id w=$BATS_TEST_TMPDIR/mnt
  mkdir "$w"
  chown 1000:1000 "$w"
  id=$(sb_create --backend fncall --mount "$w:/work")
  echo f >"$H/f"
  run -1 --separate-stderr dsec-run cp "$H/f" "$id:/etc/"
  [[ $stderr == *"Read-only file system"* ]]
  dsec-run cp "$H/f" "$id:/work/" >/dev/null
  [ "$(cat "$w/f")" = f ]
  [ "$(stat -c %u:%g "$w/f")" = 1000:1000 ]
  [ "$(sx "$id" 'cat /work/f')" = f ]
  dsec-run cp "$id:/etc/passwd" "$H/passwd" >/dev/null
  grep -q '^root:' "$H/passwd"
  # with a read-write mount no set-id bit is made, -a or not
  echo s >"$H/suid"
  chmod 4755 "$H/suid"
  run -1 --separate-stderr dsec-run cp -a "$H/suid" "$id:/work/"
  [ -z "$(find "$w" -perm /6000)" ]
  [ -z "$(find "$w" -name '.dsec-cp.*')" ]
}

@test "cp: fncall: a copy into the per-call /tmp is refused (3), not answered copied and lost" {
  local id
  id=$(sb_create --backend fncall)
  echo f >"$H/f"
  # what the call would lose at once is refused as bad input (3)
  run -3 --separate-stderr dsec-run cp "$H/f" "$id:/tmp/"
  [[ $stderr == *"keeps nothing between calls"* ]]
  run -3 --separate-stderr dsec-run cp "$H/f" "$id:/tmp/../tmp/x"
  dsec-run trajectory "$id" | jq -se 'map(select(.type == "copy")) == []'
}

@test "cp -a into a read-write mount: nothing lands as host root or as the source's host ids" {
  local id w=$BATS_TEST_TMPDIR/mnt base
  mkdir "$w" "$H/own"
  chown 1000:1000 "$w"
  echo r >"$H/own/root-file"
  echo x >"$H/own/f"
  chown 1234:2345 "$H/own/f"
  id=$(sb_create --mount "$w:/work")
  base=$(dsec-run inspect "$id" | jq -r '.idmap.host_base')
  run -0 --separate-stderr dsec-run cp -a "$H/own" "$id:/work/"
  # inside, the owners are the source's
  [ "$(sx "$id" 'stat -c "%n %u:%g" /work/own/root-file /work/own/f')" = \
    "$(printf '%s\n' "/work/own/root-file 0:0" "/work/own/f 1234:2345")" ]
  # outside, the sandbox's root is the mount's owner, and its other ids
  # its own host ids: neither host root nor host user 1234
  [ "$(stat -c %u:%g "$w/own/root-file")" = 1000:1000 ]
  [ "$(stat -c %u:%g "$w/own/f")" = "$((base + 1234)):$((base + 2345))" ]
  [ -z "$(find "$w" -uid 0 -o -gid 0 -o -uid 1234 -o -gid 2345)" ]
  [ -z "$(find "$w" -perm /6000)" ]
}

@test "cp: a microvm, a small tree in and out" {
  require_vm
  local id rec
  rec=$(dsec-vm create --image busybox:1)
  id=$(jq -r .id <<<"$rec")
  echo "$id" >>"$SB_IDS"
  mkdir -p "$H/src/sub"
  for i in $(seq 0 255); do printf "\\$(printf %03o "$i")"; done >"$H/src/bytes"
  head -c $((1024 * 1024 + 3)) /dev/urandom >"$H/src/sub/big"
  : >"$H/src/empty"
  ln -s bytes "$H/src/rel"
  echo s >"$H/src/suid"
  chmod 4755 "$H/src/suid"
  touch -d '2001-02-03 04:05:06' "$H/src/bytes"
  run -0 --separate-stderr dsec-vm cp "$H/src" "$id:/tmp/"
  out_jq '.direction == "in" and .files == 4 and .skipped == 0'
  [ "$(dsec-vm exec "$id" -- stat -c '%a %Y' /tmp/src/suid /tmp/src/bytes | jq -r .stdout)" = \
    "$(printf '755 %s\n%s %s' "$(stat -c %Y "$H/src/suid")" 644 "$(stat -c %Y "$H/src/bytes")")" ]
  run -0 --separate-stderr dsec-vm cp "$id:/tmp/src" "$H/back"
  out_jq '.direction == "out" and .files == 4'
  cmp "$H/src/bytes" "$H/back/bytes"
  cmp "$H/src/sub/big" "$H/back/sub/big"
  cmp "$H/src/empty" "$H/back/empty"
  [ "$(readlink "$H/back/rel")" = bytes ]
  [ "$(stat -c %Y "$H/back/bytes")" = "$(stat -c %Y "$H/src/bytes")" ]
  [ "$(stat -c %a "$H/back/suid")" = 755 ]
  dsec-vm trajectory "$id" | jq -se 'map(select(.type == "copy") | .result.direction) == ["in", "out"]'
}
