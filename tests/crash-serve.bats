#!/usr/bin/env bats
# Crash tests through dsec-run serve: create, exec with seq, checkpoint,
# suspend --release, resume, fork and rm, each one request to one serve
# process (the preparation's requests too), killed with SIGKILL at each
# point the run reaches (see crash.bats and helpers/crash.bash): serve's
# own ("serve request started", "serve answer written"), those of the
# process serve runs the request in (a kill there takes serve with it:
# dsec_crash_group, as when the whole of serve is killed), and those of
# the supervisor under it (serve lives on and answers).  After each kill,
# besides crash.bats's checks: a new serve reconnects to every sandbox
# (inspect answers with it), the answered execs replay through it, and
# the rerun of the request goes through it.

bats_require_minimum_version 1.5.0

load helpers/common
load helpers/fn-assert
load helpers/run
load helpers/crash

setup_file() {
  crash_setup_file
}

teardown_file() {
  sb_file_teardown
}

setup() {
  crash_setup
  SV=
  SV_N=0
}

teardown() {
  exec 5>&- 6<&-
  crash_teardown
}

# --- serve ------------------------------------------------------------------

# sv_start [AT]: a dsec-run serve for this run ($SV: its pid), under the
# crash points when AT is given (as crashing: empty lists them only),
# taking requests on fd 5 and answering on fd 6.
sv_start() {
  local in out
  SV_N=$((SV_N + 1))
  in="$IT/serve-$SV_N.in"
  out="$IT/serve-$SV_N.out"
  mkfifo "$in" "$out"
  SV_LISTED=$#
  SV_ANSWERED=0
  SV_SHELL=$BASHPID
  if [ $# -gt 0 ]; then
    bg env DSEC_CRASH_LIST="$POINTS" DSEC_CRASH_AT="${1:-0}" \
      sh -c 'exec dsec-run serve <"$1" >"$2" 2>>"$3"' sh "$in" "$out" \
      "$IT/serve.err"
  else
    bg sh -c 'exec dsec-run serve <"$1" >"$2" 2>>"$3"' sh "$in" "$out" \
      "$IT/serve.err"
  fi
  SV=$BG
  # (in the order serve opens them)
  exec 5>"$in" 6<"$out"
}

# sv_stop: ends this run's serve (its input closed, it ends once what it
# runs is answered) and waits (60 s at most) until no process of it is
# left: a request's process outlives a serve killed alone.
sv_stop() {
  local i left p
  exec 5>&- 6<&-
  [ -n "$SV" ] || return 0
  for ((i = 0; i < 600; i++)); do
    left=
    sb_alive "$SV" && left=$SV
    for p in $(sb_pids); do
      [ "$(cat "/proc/$p/comm" 2>/dev/null)" = dsec-run ] && left="$left $p"
    done
    [ -z "$left" ] && break
    sleep 0.1
  done
  if [ -n "$left" ]; then
    echo "serve's processes did not end: $left" >&2
    return 1
  fi
  wait "$SV" 2>/dev/null || true
  SV=
}

# sv_req JSON: sends the request (with a rid of its own) and prints the
# answer (without its rid); status 0 for an answer, an error's exit_code
# (and its message on stderr), 137 when serve ended without answering.
sv_req() {
  local rid="$BASHPID-$RANDOM$RANDOM" req line st
  req=$(jq -c --arg r "$rid" '. + {rid: $r}' <<<"$1")
  # (in a subshell: a serve gone kills the writer with SIGPIPE)
  (echo "$req" >&5) 2>/dev/null || {
    echo "serve is gone: $req not sent" >&2
    return 137
  }
  while IFS= read -r -t 600 -u 6 line; do
    jq -e --arg r "$rid" '.rid == $r and .type != "output"' <<<"$line" \
      >/dev/null || continue
    sv_answered
    if jq -e '.type == "error"' <<<"$line" >/dev/null; then
      jq -r .error <<<"$line" >&2
      st=$(jq -r '.exit_code // 1' <<<"$line")
      return "$st"
    fi
    jq -c 'del(.rid)' <<<"$line"
    return 0
  done
  echo "serve ended without answering $req" >&2
  return 137
}

# sv_answered: under the crash points, waits (60 s at most) until serve
# has listed the point after its answer, so that the points of a run
# are listed in the order of its requests (what the test counts as the
# preparation's, then the operation's).  Skipped in a subshell: it
# counts in this shell's SV_ANSWERED.
sv_answered() {
  local i
  [ "$SV_LISTED" -gt 0 ] && [ "$BASHPID" = "$SV_SHELL" ] || return 0
  SV_ANSWERED=$((SV_ANSWERED + 1))
  for ((i = 0; i < 600; i++)); do
    [ "$(grep -cxF 'serve answer written' "$POINTS")" -ge "$SV_ANSWERED" ] &&
      return 0
    sb_alive "$SV" || return 0
    sleep 0.1
  done
  echo "serve never listed its answer $SV_ANSWERED" >&2
  return 1
}

# sv_json ARG...: jq -nc ARG... (a request).
sv_json() { jq -nc "$@"; }

# --- the hooks of helpers/crash.bash -----------------------------------------

crash_exec() {
  sv_req "$(sv_json --arg id "$1" --argjson s "$2" --arg c "$3" \
    '{op: "exec", id: $id, seq: $s, cmd: ["sh", "-c", $c]}')"
}

# A new serve, which sees every sandbox of the store.
crash_restart() {
  local id
  sv_stop || return
  sv_start
  settle || return
  for id in $(dsec-run ps --all | jq -r .id); do
    sv_req "$(sv_json --arg id "$id" '{op: "inspect", id: $id}')" \
      >"$IT/inspect" 2>"$IT/inspect.err" || {
      echo "inspect $id through a new serve failed: $(cat "$IT/inspect.err")" >&2
      return 1
    }
    jq -e --arg id "$id" '.id == $id' "$IT/inspect" >/dev/null || {
      echo "inspect $id through a new serve: $(cat "$IT/inspect")" >&2
      return 1
    }
  done
}

crash_quiesce() { sv_stop; }

# --- the preparations and operations, as requests to serve -------------------

prep_none() { sv_start "$1"; }

prep_sandbox() {
  sv_start "$1"
  sv_req '{"op":"create","spec":{"image":"busybox:1"}}' >"$IT/created" ||
    return
  jq -r .id "$IT/created" >"$IT/id"
  cat "$IT/id" >>"$SB_IDS"
  crash_exec "$(sb_id)" 1 "$CMD1" >"$IT/answer"
}

prep_released() {
  prep_sandbox "$1" || return
  op_suspend >/dev/null
}

# sv_op OP: the request {op: OP, id: the sandbox} and what else is given
# as jq's object fields (JSON text).
sv_op() {
  local more=${2:-'{}'}
  sv_req "$(sv_json --arg op "$1" --arg id "$(sb_id)" \
    "{op: \$op, id: \$id} + $more")"
}

op_create() { sv_req '{"op":"create","spec":{"image":"busybox:1"}}'; }
op_exec() { crash_exec "$(sb_id)" 2 "$CMD2"; }
op_checkpoint() { sv_op checkpoint; }
op_suspend() { sv_op suspend '{release: true}'; }
op_resume() { sv_op resume; }
op_fork() { sv_op fork; }
op_rm() { rm_waited sv_op rm; }

# --- tests -------------------------------------------------------------------

@test "crash serve: create" { crash_all op_create prep_none; }
@test "crash serve: exec with seq" { crash_all op_exec prep_sandbox; }
@test "crash serve: checkpoint" { crash_all op_checkpoint prep_sandbox; }
@test "crash serve: suspend --release" { crash_all op_suspend prep_sandbox; }
@test "crash serve: resume" { crash_all op_resume prep_released; }
@test "crash serve: fork" { crash_all op_fork prep_sandbox; }
@test "crash serve: rm" { crash_all op_rm prep_sandbox; }
