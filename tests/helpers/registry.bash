# A real OCI distribution registry (Debian's docker-registry) on 127.0.0.1
# for the registry tests, filled with skopeo.  Everything lives in
# BATS_FILE_TMPDIR; call registry_start from setup_file and registry_stop
# from teardown_file (bats runs teardown_file even when setup_file fails).
#
#   registry_start          plain HTTP registry; sets REGISTRY=127.0.0.1:PORT
#   registry_start token    a second registry on the same storage with
#                           `auth: token` and a token server (tokenserver.py);
#                           sets TOKEN_REGISTRY=127.0.0.1:PORT
#   registry_stop [token]   stops exactly the processes registry_start started
#
# The PIDs are kept in $BATS_FILE_TMPDIR/registry-{plain,token}.pid and
# tokenserver.pid.  Nothing is killed by name.

REGISTRY_WAIT_S=10

# A port nobody listens on right now (the kernel picks it; a tiny window
# remains before our server binds it, which registry_start retries).
registry_free_port() {
  python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

# Succeeds once http://ADDR/v2/ answers at all (200, or 401 when it wants a
# token).
_registry_answers() {
  local code
  code=$(curl -s -o /dev/null -m 2 -w '%{http_code}' "http://$1/v2/") || true
  [ "$code" = 200 ] || [ "$code" = 401 ]
}

# True while PID runs (a zombie counts as gone).
_registry_alive() {
  local state
  kill -0 "$1" 2>/dev/null || return 1
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ "$state" != Z ]
}

# _registry_kill PIDFILE MATCH: stops the PID in PIDFILE if its command line
# still contains MATCH (so a recycled PID is never hit), waits (bounded).
_registry_kill() {
  local pidfile=$1 match=$2 pid i
  [ -f "$pidfile" ] || return 0
  pid=$(cat "$pidfile")
  rm -f "$pidfile"
  [ -n "$pid" ] || return 0
  if _registry_alive "$pid" &&
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$match"; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < REGISTRY_WAIT_S * 10; i++)); do
      _registry_alive "$pid" || break
      sleep 0.1
    done
    if _registry_alive "$pid"; then
      kill -KILL "$pid" 2>/dev/null || true
      for ((i = 0; i < 50; i++)); do
        _registry_alive "$pid" || break
        sleep 0.1
      done
    fi
  fi
  # Reap it when it is our child; returns at once otherwise.
  wait "$pid" 2>/dev/null || true
}

# _registry_serve KIND CONFIG-BODY-WITHOUT-HTTP: writes the config with a
# free port and starts the registry until /v2/ answers; sets _REGISTRY_ADDR.
# (Not run in $(...): the registry stays a child of this shell, so that
# registry_stop can reap it.)
_registry_serve() {
  local kind=$1 body=$2 dir="$BATS_FILE_TMPDIR/registry-$1"
  local cfg="$dir/config.yml" pidfile="$BATS_FILE_TMPDIR/registry-$kind.pid"
  local attempt port pid i
  mkdir -p "$dir"
  for attempt in 1 2 3; do
    port=$(registry_free_port)
    {
      printf '%s\n' "$body"
      printf 'http:\n  addr: 127.0.0.1:%s\n  secret: dsec-test-%s\n' \
        "$port" "$kind"
    } >"$cfg"
    # fd 3 is bats' output: a background process holding it stalls bats.
    docker-registry serve "$cfg" >"$dir/log" 2>&1 </dev/null 3>&- &
    pid=$!
    echo "$pid" >"$pidfile"
    for ((i = 0; i < REGISTRY_WAIT_S * 10; i++)); do
      if _registry_answers "127.0.0.1:$port"; then
        _REGISTRY_ADDR=127.0.0.1:$port
        return 0
      fi
      _registry_alive "$pid" || break
      sleep 0.1
    done
    echo "registry ($kind) on port $port did not answer (attempt $attempt):" >&2
    cat "$dir/log" >&2
    _registry_kill "$pidfile" "$cfg"
  done
  return 1
}

_registry_storage_yaml() {
  cat <<EOF
version: 0.1
log:
  level: info
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $BATS_FILE_TMPDIR/registry-storage
  delete:
    enabled: true
EOF
}

# Starts tokenserver.py with a fresh key and self-signed certificate.
# Sets TOKEN_SERVER=127.0.0.1:PORT.
_registry_token_server() {
  local dir="$BATS_FILE_TMPDIR/registry-token" pid i
  local pidfile="$BATS_FILE_TMPDIR/tokenserver.pid"
  mkdir -p "$dir"
  openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 2 \
    -subj /CN=dsec-test-token-issuer -keyout "$dir/key.pem" \
    -out "$dir/cert.pem" 2>/dev/null || return 1
  rm -f "$dir/port"
  python3 "$DSEC_SRCDIR/tests/helpers/tokenserver.py" "$dir/port" \
    "$dir/key.pem" "$dir/cert.pem" dsec-test-issuer "$dir/tokens.log" \
    >"$dir/tokenserver.log" 2>&1 </dev/null 3>&- &
  pid=$!
  echo "$pid" >"$pidfile"
  for ((i = 0; i < REGISTRY_WAIT_S * 10; i++)); do
    if [ -s "$dir/port" ]; then
      TOKEN_SERVER=127.0.0.1:$(cat "$dir/port")
      export TOKEN_SERVER
      return 0
    fi
    _registry_alive "$pid" || break
    sleep 0.1
  done
  echo "token server did not start:" >&2
  cat "$dir/tokenserver.log" >&2
  return 1
}

registry_start() {
  case "${1:-}" in
  "")
    _registry_serve plain "$(_registry_storage_yaml)" || return 1
    REGISTRY=$_REGISTRY_ADDR
    export REGISTRY
    ;;
  token)
    # Same storage as the plain registry: what was pushed there is served
    # here too, but only with a token.
    _registry_token_server || return 1
    _registry_serve token "$(_registry_storage_yaml)
auth:
  token:
    realm: http://$TOKEN_SERVER/token
    service: dsec-test-registry
    issuer: dsec-test-issuer
    rootcertbundle: $BATS_FILE_TMPDIR/registry-token/cert.pem" || return 1
    TOKEN_REGISTRY=$_REGISTRY_ADDR
    export TOKEN_REGISTRY
    ;;
  *)
    echo "registry_start: unknown kind \`$1'" >&2
    return 2
    ;;
  esac
}

registry_stop() {
  case "${1:-}" in
  "")
    _registry_kill "$BATS_FILE_TMPDIR/registry-plain.pid" \
      "$BATS_FILE_TMPDIR/registry-plain/config.yml"
    ;;
  token)
    _registry_kill "$BATS_FILE_TMPDIR/registry-token.pid" \
      "$BATS_FILE_TMPDIR/registry-token/config.yml"
    _registry_kill "$BATS_FILE_TMPDIR/tokenserver.pid" tokenserver.py
    ;;
  esac
}

# registry_mkoci OUTDIR SPEC-JSON: writes an OCI image layout.  SPEC is
#   {"tag": "v1", "index": false,
#    "images": [{"arch": "amd64", "env": ["K=V"], "layers": ["a.tar", ...]}]}
# A layer file is a tar or a gzip'd tar (a plain tar is gzip'd, without a
# timestamp).  With "index": true (or several images) the tag names an OCI
# image index with one manifest per image and its platform.
registry_mkoci() {
  python3 - "$@" <<'EOF'
import gzip, hashlib, json, os, sys

out, spec = sys.argv[1], json.loads(sys.argv[2])
os.makedirs(os.path.join(out, "blobs", "sha256"), exist_ok=True)

def blob(data):
    d = hashlib.sha256(data).hexdigest()
    with open(os.path.join(out, "blobs", "sha256", d), "wb") as f:
        f.write(data)
    return "sha256:" + d

def jblob(obj):
    data = json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    return blob(data), len(data)

manifests = []
for img in spec["images"]:
    layers, diff_ids = [], []
    for path in img["layers"]:
        with open(path, "rb") as f:
            data = f.read()
        if data[:2] == b"\x1f\x8b":
            raw = gzip.decompress(data)
        else:
            raw, data = data, gzip.compress(data, mtime=0)
        diff_ids.append("sha256:" + hashlib.sha256(raw).hexdigest())
        layers.append({"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
                       "digest": blob(data), "size": len(data)})
    arch = img.get("arch", "amd64")
    config = {"architecture": arch, "os": "linux",
              "config": {"Env": img.get("env", ["PATH=/usr/sbin:/usr/bin:/sbin:/bin"]),
                         "Cmd": ["/bin/sh"]},
              "rootfs": {"type": "layers", "diff_ids": diff_ids}}
    cd, cs = jblob(config)
    manifest = {"schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           "digest": cd, "size": cs},
                "layers": layers}
    md, ms = jblob(manifest)
    manifests.append({"mediaType": "application/vnd.oci.image.manifest.v1+json",
                      "digest": md, "size": ms,
                      "platform": {"architecture": arch, "os": "linux"}})

if spec.get("index") or len(manifests) > 1:
    idx = {"schemaVersion": 2,
           "mediaType": "application/vnd.oci.image.index.v1+json",
           "manifests": manifests}
    d, s = jblob(idx)
    top = {"mediaType": "application/vnd.oci.image.index.v1+json",
           "digest": d, "size": s}
else:
    top = dict(manifests[0])
    del top["platform"]
top["annotations"] = {"org.opencontainers.image.ref.name": spec["tag"]}
with open(os.path.join(out, "index.json"), "w") as f:
    json.dump({"schemaVersion": 2, "manifests": [top]}, f)
with open(os.path.join(out, "oci-layout"), "w") as f:
    json.dump({"imageLayoutVersion": "1.0.0"}, f)
EOF
}

# registry_push LAYOUT TAG REPO:TAG [--all]: copies oci:LAYOUT:TAG to the
# plain registry.
registry_push() {
  local layout=$1 tag=$2 dest=$3
  shift 3
  skopeo copy -q "$@" --dest-tls-verify=false \
    "oci:$layout:$tag" "docker://$REGISTRY/$dest" >&2
}

# registry_digest REPO:TAG: the digest of the manifest (or index) the plain
# registry serves for it.
registry_digest() {
  skopeo inspect --raw --tls-verify=false "docker://$REGISTRY/$1" |
    sha256sum | awk '{print "sha256:" $1}'
}

# A reproducible tar of directory DIR in OUT (owners 0, times 0, sorted).
registry_tar_dir() {
  tar -C "$1" --numeric-owner --owner=0 --group=0 --sort=name --mtime=@0 \
    -cf "$2" .
}
