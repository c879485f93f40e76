#!/usr/bin/env bats
# network {"mode":"proxy"}: the sandbox's only way out is the supervisor's
# HTTP/HTTPS proxy on its 127.0.0.1:3128, which checks every attempt
# against allow and deny and records it.  Traffic goes only to servers
# this file starts on the host's loopback, or in a network namespace a test
# makes (testns_setup: names resolved by a hosts file of the test's own).

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
  for _ in $(seq 100); do
    python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORT), 1)" 2>/dev/null && break
    sleep 0.1
  done
  python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORT), 1)" ||
    { echo "the host's web server did not start" >&2; return 1; }
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
  # ClientHellos for www.dsec-test.example (large, as a browser's with a
  # post-quantum key share), for another name and without SNI; each also
  # cut into 3 pieces (the first not even a record header) of records of
  # 100 bytes, to be written one by one
  python3 - "$BATS_FILE_TMPDIR/t" <<'PY'
import struct, sys
d = sys.argv[1]
def ext(t, b):
    return struct.pack(">HH", t, len(b)) + b
def hello(name):
    exts = b""
    if name:
        lst = struct.pack(">BH", 0, len(name)) + name
        exts += ext(0, struct.pack(">H", len(lst)) + lst)
    share = struct.pack(">HH", 0x11ec, 1216) + b"\x11" * 1216
    exts += ext(0x33, struct.pack(">H", len(share)) + share)
    exts += ext(0x2b, b"\x02\x03\x04")
    body = b"\x03\x03" + b"\x42" * 32 + b"\x00" + b"\x00\x02\x13\x01" + b"\x01\x00"
    body += struct.pack(">H", len(exts)) + exts
    msg = b"\x01" + struct.pack(">I", len(body))[1:] + body
    out = b""
    for i in range(0, len(msg), 100):
        part = msg[i:i + 100]
        out += b"\x16\x03\x01" + struct.pack(">H", len(part)) + part
    return out
for tag, name in (("good", b"www.dsec-test.example"),
                  ("wrong", b"other.dsec-test.example"), ("nosni", None)):
    h = hello(name)
    open("%s/%s.bin" % (d, tag), "wb").write(h)
    for i, (a, b) in enumerate(((0, 2), (2, 250), (250, len(h)))):
        open("%s/%s.%d" % (d, tag, i + 1), "wb").write(h[a:b])
PY
  chmod -R a+rX "$BATS_FILE_TMPDIR/t"
  # the upstream end of tunnels: keeps what each connection sends
  cat >"$BATS_FILE_TMPDIR/sink.py" <<'PY'
import os, socket, sys, threading
addr, port, d = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.makedirs(d, exist_ok=True)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((addr, port))
s.listen(16)
def keep(c, path):
    with open(path, "wb", buffering=0) as f:
        while True:
            b = c.recv(65536)
            if not b:
                break
            f.write(b)
    c.close()
n = 0
while True:
    c, _ = s.accept()
    n += 1
    threading.Thread(target=keep, args=(c, "%s/conn-%d.bin" % (d, n)),
                     daemon=True).start()
PY
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

# every sandbox of the test's store removed, no cgroup or process left,
# and the test's network namespace gone
teardown() {
  local rc=0
  sb_teardown || rc=1
  if [ -n "${NS-}" ]; then
    ip netns del "$NS" || rc=1
  fi
  return $rc
}

# testns_setup: a network of the test's own.  A network namespace whose
# loopback has an ordinary address, 11.22.33.44, that exists nowhere else,
# with a web server on its port 8080 and a sink (sink.py) on 443; and a
# hosts file naming it and special-purpose addresses.  A sandbox made with
# WRAP=in_testns is created from inside that namespace and from a mount
# namespace where the hosts file is /etc/hosts: its supervisor, and so the
# proxy, resolves names with that file and connects in that namespace.
# Nothing in dsec knows: there is no test switch in the production code.
TESTNS_ADDR=11.22.33.44
testns_setup() {
  NS="dsec-proxy-$$-$BATS_TEST_NUMBER"
  ip netns add "$NS"
  ip -n "$NS" link set lo up
  ip -n "$NS" addr add "$TESTNS_ADDR/32" dev lo
  cat >"$BATS_TEST_TMPDIR/hosts" <<EOF
127.0.0.1 localhost
$TESTNS_ADDR www.dsec-test.example
$TESTNS_ADDR www2.dsec-test.example
100.64.7.7 cgn.dsec-test.example
::ffff:127.0.0.1 mapped.dsec-test.example
64:ff9b::b16:212c nat64.dsec-test.example
$TESTNS_ADDR mixed.dsec-test.example
10.1.2.3 mixed.dsec-test.example
EOF
  bg nsenter --net="/run/netns/$NS" python3 -m http.server 8080 \
    --bind "$TESTNS_ADDR" --directory "$BATS_FILE_TMPDIR/www" >/dev/null 2>&1
  bg nsenter --net="/run/netns/$NS" python3 "$BATS_FILE_TMPDIR/sink.py" \
    "$TESTNS_ADDR" 443 "$BATS_TEST_TMPDIR/sink"
  for _ in $(seq 100); do
    nsenter --net="/run/netns/$NS" python3 -c "
import socket
for p in (8080, 443):
    socket.create_connection(('$TESTNS_ADDR', p), 1).close()" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "the test network's servers did not start" >&2
  return 1
}

# in_testns CMD...: CMD in the test's network and with its hosts file
in_testns() {
  nsenter --net="/run/netns/$NS" unshare -m --propagation slave \
    sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$BATS_TEST_TMPDIR/hosts" "$@"
}

# sandbox ALLOW-JSON [DENY-JSON]: a proxy-mode sandbox named px (created
# through $WRAP when set)
sandbox() {
  printf '{"image":"busybox:1","name":"px","network":{"mode":"proxy","allow":%s,"deny":%s},"mounts":[{"source":"%s","target":"/opt/t","ro":true}]}\n' \
    "$1" "${2:-[]}" "$BATS_FILE_TMPDIR/t" >"$BATS_TEST_TMPDIR/spec.json"
  run -0 --separate-stderr ${WRAP:-} dsec-run create --spec "$BATS_TEST_TMPDIR/spec.json"
}

# raw FORMAT: sends printf FORMAT (its escapes) to the proxy, and prints
# the answer
raw() {
  run -0 --separate-stderr dsec-run exec --timeout 20 px -- sh -c \
    "printf '$1' | nc 127.0.0.1 3128; echo rc=\$?"
}

# tunnel HOST:PORT FILE...: a CONNECT, then each file's bytes, a second
# apart (so that each piece arrives on its own; what is checked does not
# depend on it)
tunnel() {
  local target=$1 cmd f
  shift
  cmd="printf 'CONNECT $target HTTP/1.1\\r\\nHost: $target\\r\\n\\r\\n'; sleep 1"
  for f in "$@"; do
    cmd="$cmd; cat /opt/t/$f; sleep 1"
  done
  run -0 --separate-stderr dsec-run exec --timeout 30 px -- sh -c \
    "($cmd; sleep 1) | nc 127.0.0.1 3128 >/dev/null; echo rc=\$?"
}

# wait_event JQ-CONDITION: polls (10 s) until a network event matches
wait_event() {
  for _ in $(seq 100); do
    events | jq -e -s "any(.[]; $1)" >/dev/null && return 0
    sleep 0.1
  done
  echo "no network event with $1; there are:" >&2
  events >&2
  return 1
}

# sink_got FILE: polls (10 s) until a connection to the sink brought
# exactly the bytes of FILE (of the sandbox's /opt/t)
sink_got() {
  local f
  for _ in $(seq 100); do
    for f in "$BATS_TEST_TMPDIR"/sink/conn-*.bin; do
      [ -f "$f" ] && cmp -s "$f" "$BATS_FILE_TMPDIR/t/$1" && return 0
    done
    sleep 0.1
  done
  echo "the sink never got $1" >&2
  return 1
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

@test "proxy: a trailing dot, capitals or a non-ASCII name do not get around deny or the default deny list" {
  sandbox '["*"]' '["example.org"]'
  raw 'GET http://GITHUB.COM./x HTTP/1.1\r\nHost: GITHUB.COM.\r\n\r\n'
  jq -e '.stdout | test("the-solution") | not' <<<"$output"
  raw 'GET http://Example.ORG./ HTTP/1.1\r\nHost: example.org\r\n\r\n'
  raw 'CONNECT Raw.GitHubUserContent.com.:443 HTTP/1.1\r\n\r\n'
  raw 'CONNECT github.com..:443 HTTP/1.1\r\n\r\n'
  raw 'CONNECT g\303\257thub.com:443 HTTP/1.1\r\n\r\n'
  wait_event '.host == "github.com" and .method == "GET" and .allowed == false and (.reason | test("registry"))'
  wait_event '.host == "example.org" and .allowed == false and (.reason | test("denied by the spec"))'
  wait_event '.host == "raw.githubusercontent.com" and .method == "CONNECT" and .allowed == false and (.reason | test("registry"))'
  wait_event '.allowed == false and .target == "github.com..:443" and (.reason | test("empty label"))'
  wait_event '.allowed == false and .target == "g\\xc3\\xafthub.com:443" and (.reason | test("non-ASCII"))'
  events | jq -e -s 'all(.[]; .allowed == false)'
}

@test "proxy: a Host header that names another host than the request is refused (403) and recorded" {
  sandbox "[\"127.0.0.1:$PORT\"]"
  run -0 --separate-stderr dsec-run exec px -- sh -c \
    "wget -q -O- --header 'Host: github.com' http://127.0.0.1:$PORT/answer.txt; echo rc=\$?"
  jq -e '.stdout | test("the-solution") | not' <<<"$output"
  jq -e '.stderr | test("403")' <<<"$output"
  wait_event '.host == "127.0.0.1" and .host_header == "github.com" and .allowed == false and (.reason | test("Host header names another host"))'
  # another port, and no Host at all
  raw "GET http://127.0.0.1:$PORT/answer.txt HTTP/1.1\\r\\nHost: 127.0.0.1:1\\r\\n\\r\\n"
  jq -e '.stdout | test("the-solution") | not' <<<"$output"
  wait_event '.host_header_port == 1 and .allowed == false and (.reason | test("another port"))'
  raw "GET http://127.0.0.1:$PORT/answer.txt HTTP/1.0\\r\\n\\r\\n"
  jq -e '.stdout | test("the-solution") | not' <<<"$output"
  wait_event '.allowed == false and .reason == "no Host header"'
  # a CONNECT's Host, when there is one, names its target
  raw "CONNECT 127.0.0.1:$PORT HTTP/1.1\\r\\nHost: github.com:443\\r\\n\\r\\n"
  wait_event '.method == "CONNECT" and .host_header == "github.com" and .allowed == false'
  # the same host in another form is the same host
  fetch "http://127.1:$PORT/answer.txt"
  jq -e '.stdout == "the-solution\nrc=0\n"' <<<"$output"
}

@test "proxy: an IP address is refused through a wildcard, in every form" {
  sandbox '["*"]'
  for a in 127.0.0.1 127.1 0x7f.1 2130706433 0177.0.0.1 "[::1]"; do
    fetch "http://$a:$PORT/answer.txt"
    jq -e '.stdout | test("the-solution") | not' <<<"$output"
  done
  [ "$(events | jq -s --argjson p "$PORT" \
    '[.[] | select(.host == "127.0.0.1" and .port == $p and .allowed == false and (.reason | test("IP address")))] | length')" -eq 5 ]
  events | jq -e -s 'any(.[]; .host == "::1" and .allowed == false)'
}

@test "proxy: an IP address passes when an allow entry names it, in any of its forms" {
  sandbox "[\"127.1:$PORT\"]"
  for a in 127.0.0.1 0x7f.1 2130706433; do
    fetch "http://$a:$PORT/answer.txt"
    jq -e '.stdout == "the-solution\nrc=0\n"' <<<"$output"
  done
  [ "$(events | jq -s --argjson p "$PORT" \
    '[.[] | select(.host == "127.0.0.1" and .port == $p and .allowed)] | length')" -eq 3 ]
}

@test "proxy: a name that resolves to the host's loopback is refused even when allow names it" {
  sandbox "[\"localhost:$PORT\"]"
  fetch "http://localhost:$PORT/answer.txt"
  jq -e '.stdout | test("the-solution") | not' <<<"$output"
  wait_event '.host == "localhost" and .address == "127.0.0.1" and .allowed == false and (.reason | test("private"))'
}

@test "proxy: names resolving to shared, v4-mapped, NAT64 or partly private addresses are refused" {
  testns_setup
  WRAP=in_testns sandbox '["*.dsec-test.example"]'
  # the test network works: an ordinary address is reached by name
  fetch "http://www.dsec-test.example:8080/answer.txt"
  jq -e '.stdout == "the-solution\nrc=0\n"' <<<"$output"
  wait_event '.host == "www.dsec-test.example" and .port == 8080 and .allowed'
  for n in cgn mapped nat64 mixed; do
    fetch "http://$n.dsec-test.example:8080/answer.txt"
    jq -e '.stdout | test("the-solution") | not' <<<"$output"
  done
  wait_event '.host == "cgn.dsec-test.example" and .address == "100.64.7.7" and .allowed == false and (.reason | test("private"))'
  wait_event '.host == "mapped.dsec-test.example" and .address == "::ffff:127.0.0.1" and .allowed == false'
  wait_event '.host == "nat64.dsec-test.example" and .address == "64:ff9b::b16:212c" and .allowed == false'
  wait_event '.host == "mixed.dsec-test.example" and .address == "10.1.2.3" and .allowed == false'
}

@test "proxy: a ClientHello cut across records and writes is read whole, and its SNI must name the CONNECT host" {
  testns_setup
  WRAP=in_testns sandbox '["www.dsec-test.example:443"]'
  tunnel www.dsec-test.example:443 good.1 good.2 good.3
  wait_event '.method == "CONNECT" and .host == "www.dsec-test.example" and .port == 443 and .allowed and .tls and .sni == "www.dsec-test.example"'
  # the server got the hello as it was sent
  sink_got good.bin
  tunnel www.dsec-test.example:443 wrong.1 wrong.2 wrong.3
  wait_event '.method == "CONNECT" and .allowed == false and .sni == "other.dsec-test.example" and (.reason | test("SNI that names another host"))'
  ! grep -l other.dsec-test "$BATS_TEST_TMPDIR"/sink/conn-*.bin
}

@test "proxy: a tunnel to port 443 without SNI, or not TLS, is cut and recorded" {
  testns_setup
  WRAP=in_testns sandbox '["www.dsec-test.example:443"]'
  tunnel www.dsec-test.example:443 nosni.1 nosni.2 nosni.3
  wait_event '.method == "CONNECT" and .allowed == false and (.reason | test("without SNI"))'
  raw 'CONNECT www.dsec-test.example:443 HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\nHost: github.com\r\n\r\n'
  wait_event '.method == "CONNECT" and .allowed == false and (.reason | test("not TLS on a tunnel to port 443"))'
  [ -z "$(cat "$BATS_TEST_TMPDIR"/sink/conn-*.bin 2>/dev/null)" ]
}

@test "proxy: a plain tunnel goes only to a host and port an allow entry names, not through a wildcard" {
  testns_setup
  WRAP=in_testns sandbox '["www.dsec-test.example:8080", "*.dsec-test.example"]'
  raw 'CONNECT www.dsec-test.example:8080 HTTP/1.1\r\n\r\nGET /answer.txt HTTP/1.0\r\n\r\n'
  jq -e '.stdout | test("the-solution")' <<<"$output"
  wait_event '.host == "www.dsec-test.example" and .port == 8080 and .allowed and .tls == false'
  raw 'CONNECT www2.dsec-test.example:8080 HTTP/1.1\r\n\r\nGET /answer.txt HTTP/1.0\r\n\r\n'
  jq -e '.stdout | test("the-solution") | not' <<<"$output"
  wait_event '.host == "www2.dsec-test.example" and .allowed == false and (.reason | test("not TLS on a tunnel a wildcard allowed"))'
}

@test "proxy: the default deny list refuses code mirrors, raw-content hosts and package CDNs through a wildcard" {
  sandbox '["*"]'
  for h in raw.githubusercontent.com codeload.github.com cdn.jsdelivr.net \
    registry.npmmirror.com pypi.tuna.tsinghua.edu.cn files.pythonhosted.org \
    static.crates.io web.archive.org gitee.com math.stackexchange.com; do
    raw "CONNECT $h:443 HTTP/1.1\\r\\n\\r\\n"
  done
  fetch "http://unpkg.com/react"
  [ "$(events | jq -s '[.[] | select(.allowed == false and (.reason | test("registry, mirror or code host")))] | length')" -eq 11 ]
}

@test "proxy: an allow or deny entry the proxy cannot read is bad input (3)" {
  for e in '"g\u00efthub.com"' '"a..b"' '"x.com:99999"' '"1.2.3.4.5"'; do
    printf '{"image":"busybox:1","network":{"mode":"proxy","deny":[%s]}}\n' "$e" \
      >"$BATS_TEST_TMPDIR/spec.json"
    run -3 --separate-stderr dsec-run create --spec "$BATS_TEST_TMPDIR/spec.json"
    [[ $stderr == *"network.deny[0]"* ]]
  done
}

@test "proxy: mode none has no proxy and no way out" {
  printf '{"image":"busybox:1","name":"px"}\n' >"$BATS_TEST_TMPDIR/spec.json"
  run -0 --separate-stderr dsec-run create --spec "$BATS_TEST_TMPDIR/spec.json"
  run -0 --separate-stderr dsec-run exec px -- sh -c \
    "wget -q -T 3 -O- http://127.0.0.1:3128/ ; echo rc=\$?; wget -q -T 3 -O- http://127.0.0.1:$PORT/answer.txt; echo rc=\$?"
  jq -e '.stdout | test("the-solution") | not' <<<"$output"
  jq -e '[.stdout | scan("rc=([0-9]+)")[] | tonumber] | all(. > 0)' <<<"$output"
}
