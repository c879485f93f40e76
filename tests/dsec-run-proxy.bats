#!/usr/bin/env bats
# network {"mode":"proxy"}: the sandbox's only way out is the supervisor's
# HTTP/HTTPS proxy on its 127.0.0.1:3128, which checks every attempt
# against allow and deny and records it.  Traffic goes only to a server
# this file starts on the host's loopback.

bats_require_minimum_version 1.5.0
load helpers/common
load helpers/run

setup_file() {
  PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  export PORT
  mkdir -p "$BATS_FILE_TMPDIR/www" "$BATS_FILE_TMPDIR/t"
  echo "the-solution" >"$BATS_FILE_TMPDIR/www/answer.txt"
  python3 -m http.server "$PORT" --bind 127.0.0.1 --directory "$BATS_FILE_TMPDIR/www" \
    >/dev/null 2>&1 3>&- &
  echo $! >"$BATS_FILE_TMPDIR/http.pid"
  for _ in $(seq 50); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORT), 1)" 2>/dev/null && break
    sleep 0.1
  done
  # a TLS ClientHello that asks for another name than the CONNECT host
  python3 - "$BATS_FILE_TMPDIR/t/hello.bin" <<'PY'
import struct, sys
name = b"not-the-host.example"
sni = struct.pack(">BH", 0, len(name)) + name
sni = struct.pack(">H", len(sni)) + sni
ext = struct.pack(">HH", 0, len(sni)) + sni
body = b"\x03\x03" + b"\x00" * 32 + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00"
body += struct.pack(">H", len(ext)) + ext
hs = b"\x01" + struct.pack(">I", len(body))[1:] + body
open(sys.argv[1], "wb").write(b"\x16\x03\x01" + struct.pack(">H", len(hs)) + hs)
PY
  chmod -R a+rX "$BATS_FILE_TMPDIR/t"
  busybox_tar >/dev/null
  run_file_setup
}

teardown_file() {
  kill "$(cat "$BATS_FILE_TMPDIR/http.pid")" 2>/dev/null || true
  sb_file_teardown
}

setup() {
  common_setup
  require_root
  run_setup
}

# every sandbox of the test's store removed, no cgroup or process left
teardown() {
  sb_teardown
}

# sandbox ALLOW-JSON [DENY-JSON]: a proxy-mode sandbox named px
sandbox() {
  printf '{"image":"busybox:1","name":"px","network":{"mode":"proxy","allow":%s,"deny":%s},"mounts":[{"source":"%s","target":"/opt/t","ro":true}]}\n' \
    "$1" "${2:-[]}" "$BATS_FILE_TMPDIR/t" >"$BATS_TEST_TMPDIR/spec.json"
  run -0 --separate-stderr dsec-run create --spec "$BATS_TEST_TMPDIR/spec.json"
}

fetch() {
  run -0 --separate-stderr dsec-run exec px -- sh -c "wget -q -O- $1; echo rc=\$?"
}

events() {
  dsec-run events px | jq -c 'select(.type == "network")'
}

@test "proxy: an allowed host:port is fetched through the proxy, and recorded" {
  sandbox "[\"127.0.0.1:$PORT\"]"
  fetch "http://127.0.0.1:$PORT/answer.txt"
  jq -e '.stdout == "the-solution\nrc=0\n"' <<<"$output"
  events | jq -e -s --argjson p "$PORT" \
    'any(.[]; .host == "127.0.0.1" and .port == $p and .allowed == true and .method == "GET")'
  # the proxy is what the environment names
  run -0 --separate-stderr dsec-run exec px -- sh -c 'echo $HTTP_PROXY $HTTPS_PROXY'
  jq -e '.stdout == "http://127.0.0.1:3128 http://127.0.0.1:3128\n"' <<<"$output"
}

@test "proxy: what allow does not name is refused (403) and recorded" {
  sandbox "[\"127.0.0.1:$PORT\"]"
  fetch "http://127.0.0.1:22/"
  jq -e '.stdout | test("rc=[1-9]")' <<<"$output"
  jq -e '.stderr | test("403")' <<<"$output"
  events | jq -e -s 'any(.[]; .port == 22 and .allowed == false and (.reason | test("not allowed")))'
}

@test "proxy: deny wins over allow" {
  sandbox "[\"127.0.0.1\"]" "[\"127.0.0.1:$PORT\"]"
  fetch "http://127.0.0.1:$PORT/answer.txt"
  jq -e '.stdout | test("rc=[1-9]")' <<<"$output"
  events | jq -e -s 'any(.[]; .allowed == false and (.reason | test("denied")))'
}

@test "proxy: through a wildcard, registries are refused by name and the host's loopback is not reached" {
  sandbox '["*"]'
  fetch "http://proxy.golang.org/github.com/x/y/@v/list"
  jq -e '.stdout | test("rc=[1-9]")' <<<"$output"
  fetch "http://127.0.0.1:$PORT/answer.txt"
  jq -e '.stdout | test("the-solution") | not' <<<"$output"
  events | jq -e -s 'any(.[]; .host == "proxy.golang.org" and .allowed == false and (.reason | test("registry")))'
  events | jq -e -s --argjson p "$PORT" 'any(.[]; .port == $p and .allowed == false)'
}

@test "proxy: a CONNECT whose TLS name is another host is cut and recorded" {
  sandbox "[\"127.0.0.1:$PORT\"]"
  run -0 --separate-stderr dsec-run exec --timeout 20 px -- sh -c \
    "(printf 'CONNECT 127.0.0.1:$PORT HTTP/1.1\r\n\r\n'; sleep 1; cat /opt/t/hello.bin; sleep 2) | nc 127.0.0.1 3128 | head -c 200"
  events | jq -e -s 'any(.[]; .method == "CONNECT" and .allowed == false and (.reason | test("SNI")))'
}

@test "proxy: mode none has no proxy and no way out" {
  printf '{"image":"busybox:1","name":"px"}\n' >"$BATS_TEST_TMPDIR/spec.json"
  run -0 --separate-stderr dsec-run create --spec "$BATS_TEST_TMPDIR/spec.json"
  run -0 --separate-stderr dsec-run exec px -- sh -c \
    "wget -q -T 3 -O- http://127.0.0.1:3128/ ; echo rc=\$?; wget -q -T 3 -O- http://127.0.0.1:$PORT/answer.txt; echo rc=\$?"
  jq -e '.stdout | test("the-solution") | not' <<<"$output"
  jq -e '[.stdout | scan("rc=([0-9]+)")[] | tonumber] | all(. > 0)' <<<"$output"
}
