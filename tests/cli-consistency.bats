#!/usr/bin/env bats
# --help, the man page and the bash completion of each program must tell
# the same story: the same long options, and for dsec-layer, dsec-run and
# dsec-vm the same commands, each option offered for the commands it
# applies to (dsec-layer and dsec-place: as --help says; dsec-run and
# dsec-vm: as the program itself answers).  dsec-vm's completion is
# dsec-run's (see completion_file).
# An option added to --help without a man page entry and a completion
# fails here.

load helpers/common

bats_require_minimum_version 1.5.0

PROGS=(dsec-pull dsec-layer dsec-run dsec-vm dsec-place dsec-reap)

setup() {
  common_setup
}

# The long options of `PROG --help`: the option column of its "Options:"
# lists ("Options:", "Create options (...):", "Other options:"...), one
# per line, sorted.
help_options() {
  "$1" --help | sed -nE '/^(.* )?[Oo]ptions( .*)?:$/,/^$/p' |
    grep -oE '^ +(-[A-Za-z], +)?--[a-z][a-z-]*' |
    grep -o -- '--[a-z][a-z-]*' | LC_ALL=C sort -u
}

# The commands of `PROG --help`: the first word of each entry of its
# "Commands:" list (entries are indented by two spaces).
help_commands() {
  "$1" --help | sed -n '/^Commands:/,/^$/p' |
    grep -oE '^  [a-z][a-z-]*' | tr -d ' ' | LC_ALL=C sort -u
}

# The roff source of section NAME of man page FILE (without its .SH line).
man_section() {
  awk -v s="$2" '
    /^\.SH / { sub(/^\.SH +/, ""); gsub(/"/, ""); insec = ($0 == s); next }
    insec' "$1"
}

# The tag lines (the line after each .TP or .TQ) of a section, as plain text.
man_tags() {
  man_section "$1" "$2" | awk 'tp { print; tp = 0 } /^\.T[PQ]/ { tp = 1 }' |
    sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' -e 's/\\(em//g'
}

# The long options the OPTIONS section of man page FILE documents.
man_options() {
  man_tags "$1" OPTIONS | grep -o -- '--[a-z][a-z-]*' | LC_ALL=C sort -u
}

# The same, in the order the page lists them.
man_options_in_order() {
  man_tags "$1" OPTIONS | grep -o -- '--[a-z][a-z-]*'
}

# The commands the COMMANDS section of man page FILE documents.
man_commands() {
  man_tags "$1" COMMANDS | sed -e 's/^\.[A-Z]* //' | awk '{ print $1 }' |
    LC_ALL=C sort -u
}

# The long options that appear in completion file FILE, comments aside.
completion_options() {
  grep -v '^[[:space:]]*#' "$1" | grep -o -- '--[a-z][a-z-]*' |
    LC_ALL=C sort -u
}

# The completion file that holds PROG's lists of commands and options.
# Each program's own, but for dsec-vm: completions/bash/dsec-vm lists
# nothing itself; it sources completions/bash/dsec-run (dsec-vm has
# dsec-run's commands and options, libcommon/runcmd.c being both) and
# registers its _dsec_run for dsec-vm, so dsec-vm's lists are that file's.
# Fails unless dsec-vm's file does just that.
completion_file() {
  local dir=$DSEC_SRCDIR/completions/bash own theirs
  if [ "$1" != dsec-vm ]; then
    echo "$dir/$1"
    return
  fi
  own=$(completion_options "$dir/dsec-vm")
  [ -z "$own" ] ||
    { echo "completions/bash/dsec-vm lists options of its own: $own" >&2; return 1; }
  # shellcheck disable=SC2016
  own=$(bash -c 'source "$1" && complete -p dsec-vm && declare -f _dsec_run' \
    _ "$dir/dsec-vm")
  # shellcheck disable=SC2016
  theirs=$(bash -c 'source "$1" && declare -f _dsec_run' _ "$dir/dsec-run")
  [ "$own" = "complete -F _dsec_run dsec-vm"$'\n'"$theirs" ] ||
    { echo "completions/bash/dsec-vm does not use dsec-run's _dsec_run" >&2; return 1; }
  echo "$dir/dsec-run"
}

# complete LINE: runs the completion function of LINE's program on LINE
# (the cursor at its end) and prints the candidates, one per line.
complete_line() {
  local prog=${1%% *} fn
  # shellcheck disable=SC1090
  source "$DSEC_SRCDIR/completions/bash/$prog"
  fn=$(complete -p "$prog" | sed -n 's/.*-F \([^ ]*\) .*/\1/p')
  [ -n "$fn" ] || { echo "no completion function for $prog" >&2; return 1; }
  COMP_LINE=$1
  COMP_POINT=${#COMP_LINE}
  read -ra COMP_WORDS <<<"$COMP_LINE"
  [[ $COMP_LINE == *" " ]] && COMP_WORDS+=("")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMPREPLY=()
  "$fn"
  [ "${#COMPREPLY[@]}" -eq 0 ] || printf '%s\n' "${COMPREPLY[@]}"
}

# same_set WHAT LEFT-NAME LEFT RIGHT-NAME RIGHT: fails, showing the
# difference, unless the two newline-separated lists are equal.
same_set() {
  if [ "$3" != "$5" ]; then
    echo "$1: $2 and $4 differ (< $2, > $4):" >&2
    diff <(echo "$3") <(echo "$5") >&2
    return 1
  fi
}

@test "each program lists the same options in --help, man page and completion" {
  local prog help man file comp
  for prog in "${PROGS[@]}"; do
    help=$(help_options "$prog")
    man=$(man_options "$DSEC_SRCDIR/man/$prog.1")
    file=$(completion_file "$prog")
    comp=$(completion_options "$file")
    [ -n "$help" ] || { echo "$prog: no options found in --help" >&2; false; }
    same_set "$prog" --help "$help" "man OPTIONS" "$man"
    same_set "$prog" --help "$help" completion "$comp"
  done
}

@test "each completion offers every option of --help" {
  local prog help offered
  for prog in dsec-pull dsec-reap; do
    help=$(help_options "$prog")
    offered=$(complete_line "$prog --" | LC_ALL=C sort -u)
    same_set "$prog" --help "$help" "completion of '$prog --'" "$offered"
  done

  for prog in dsec-layer dsec-place; do
    offered=$(for cmd in "" $(help_commands "$prog"); do
      complete_line "$prog $cmd${cmd:+ }--"
    done | LC_ALL=C sort -u)
    help=$(help_options "$prog")
    same_set "$prog" --help "$help" "completion of '$prog CMD --'" "$offered"
  done

  for prog in dsec-run dsec-vm; do
    offered=$(for cmd in "" $(help_commands "$prog"); do
      complete_line "$prog $cmd${cmd:+ }--"
    done | LC_ALL=C sort -u)
    help=$(help_options "$prog")
    same_set "$prog" --help "$help" "completion of '$prog CMD --'" "$offered"
  done
}

@test "man pages list their options in alphabetical order" {
  local prog order
  for prog in "${PROGS[@]}"; do
    order=$(man_options_in_order "$DSEC_SRCDIR/man/$prog.1")
    same_set "$prog" "man OPTIONS order" "$order" sorted \
      "$(echo "$order" | LC_ALL=C sort)"
  done
}

@test "man pages have the sections the style guide asks for" {
  local prog page s
  for prog in "${PROGS[@]}"; do
    page=$DSEC_SRCDIR/man/$prog.1
    for s in NAME SYNOPSIS DESCRIPTION OPTIONS INPUT OUTPUT "EXIT STATUS" \
      EXAMPLES "SEE ALSO"; do
      grep -qE "^\.SH \"?$s\"?\$" "$page" ||
        { echo "$page: no $s section" >&2; false; }
      [ -n "$(man_section "$page" "$s")" ] ||
        { echo "$page: empty $s section" >&2; false; }
    done
  done
  grep -qE '^\.SH "?COMMANDS"?$' "$DSEC_SRCDIR/man/dsec-layer.1"
  grep -qE '^\.SH "?COMMANDS"?$' "$DSEC_SRCDIR/man/dsec-place.1"
  page=$DSEC_SRCDIR/man/dsec-run.1
  for s in COMMANDS SPEC "EXEC PROTOCOL" STATES FILES SECURITY ENVIRONMENT; do
    grep -qE "^\.SH \"?$s\"?\$" "$page" ||
      { echo "$page: no $s section" >&2; false; }
    [ -n "$(man_section "$page" "$s")" ] ||
      { echo "$page: empty $s section" >&2; false; }
  done
  page=$DSEC_SRCDIR/man/dsec-vm.1
  for s in COMMANDS FILES SECURITY ENVIRONMENT; do
    grep -qE "^\.SH \"?$s\"?\$" "$page" ||
      { echo "$page: no $s section" >&2; false; }
    [ -n "$(man_section "$page" "$s")" ] ||
      { echo "$page: empty $s section" >&2; false; }
  done
}

@test "SECURITY says what is and is not enforced; ENVIRONMENT lists the variables" {
  local prog page v tags
  for prog in dsec-run dsec-vm; do
    page=$DSEC_SRCDIR/man/$prog.1
    man_section "$page" SECURITY | grep -qx '\.SS "\{0,1\}Enforced"\{0,1\}' ||
      { echo "$page: SECURITY has no Enforced part" >&2; false; }
    man_section "$page" SECURITY | grep -q '^\.SS "\{0,1\}Not enforced' ||
      { echo "$page: SECURITY has no Not enforced part" >&2; false; }
  done
  tags=$(man_tags "$DSEC_SRCDIR/man/dsec-vm.1" ENVIRONMENT |
    sed -e 's/^\.[A-Z]* //' -e 's/"//g' -e 's/, / /g' | tr ' ' '\n')
  for v in DSEC_ROOT DSEC_RUN DSEC_STORE DSEC_VM_KERNEL DSEC_VM_MODULES \
    DSEC_VM_RELEASE DSEC_VM_ACCEL DSEC_LOG_FORMAT DSEC_DEBUG; do
    grep -qx "$v" <<<"$tags" ||
      { echo "dsec-vm.1: $v not in ENVIRONMENT" >&2; false; }
  done
}

@test "man pages list every exit status" {
  local prog tags code
  for prog in "${PROGS[@]}"; do
    tags=$(man_tags "$DSEC_SRCDIR/man/$prog.1" "EXIT STATUS" |
      sed 's/^\.[A-Z]* //')
    for code in 0 1 2 3; do
      grep -qx "$code" <<<"$tags" ||
        { echo "$prog.1: exit status $code not listed" >&2; false; }
    done
  done
  # exec and run pass the command's status through; 4 is a seq conflict
  for prog in dsec-run dsec-vm; do
    tags=$(man_tags "$DSEC_SRCDIR/man/$prog.1" "EXIT STATUS" |
      sed 's/^\.[A-Z]* //')
    for code in 4 124 125 126 127 128+N; do
      grep -qx "$code" <<<"$tags" ||
        { echo "$prog.1: exit status $code not listed" >&2; false; }
    done
  done
}

@test "every command of --help is in the man page and the completion" {
  local prog help man comp
  for prog in dsec-layer dsec-run dsec-vm dsec-place; do
    help=$(help_commands "$prog")
    man=$(man_commands "$DSEC_SRCDIR/man/$prog.1")
    comp=$(complete_line "$prog " | LC_ALL=C sort -u)
    [ -n "$help" ] || { echo "$prog: no commands found in --help" >&2; false; }
    same_set "$prog" "--help commands" "$help" "man COMMANDS" "$man"
    same_set "$prog" "--help commands" "$help" "completed commands" "$comp"
  done
}

# PROG --help marks an option that only some commands take with them:
# "      --dir=DIR          (create) the layer's content".
completion_per_command() {
  local prog=$1 line opt cmds cmd offered
  while IFS= read -r line; do
    opt=$(grep -oE -- '--[a-z][a-z-]*' <<<"$line" | head -n1)
    cmds=$(sed -n 's/.*--[a-z-]*[^ ]* *(\([a-z, ]*\)).*/\1/p' <<<"$line" |
      tr -d ,)
    for cmd in $(help_commands "$prog"); do
      offered=$(complete_line "$prog $cmd --")
      if [ -z "$cmds" ] || [[ " $cmds " == *" $cmd "* ]]; then
        grep -qx -- "$opt" <<<"$offered" ||
          { echo "$prog: $opt not offered after '$cmd'" >&2; return 1; }
      else
        ! grep -qx -- "$opt" <<<"$offered" ||
          { echo "$prog: $opt offered after '$cmd' (--help: $cmds)" >&2; return 1; }
      fi
    done
  done < <("$prog" --help | sed -n '/^Options:/,/^$/p' | grep -E '^ +(-[A-Za-z], +)?--')
}

@test "dsec-layer: the completion offers each option for its commands only" {
  completion_per_command dsec-layer
}

@test "dsec-place: the completion offers each option for its commands only" {
  completion_per_command dsec-place
  # and the command refuses an option of another command
  run -2 --separate-stderr dsec-place probe --nodes x
  [[ $stderr == *"--nodes does not apply"* ]]
}

# The options PROG (dsec-run or dsec-vm) accepts for VERB ("" for before
# the command), one per line, sorted, found by asking PROG: each option of
# --help is given alone (with a value when --help shows one), with
# arguments the command rejects, so nothing is ever run.  "does not apply"
# (or, before the command, "before the command") means refused; exit 0
# (--help, --version) or another usage error means accepted; anything else
# fails.
dsec_run_accepted() {
  local prog=$1 verb=$2 line opt arg out status
  local -a extra=()
  case $verb in create | ps | pool) extra=(an-argument) ;; esac
  while IFS= read -r line; do
    opt=$(grep -oE -- '--[a-z][a-z-]*' <<<"$line" | head -n1)
    arg=
    [[ $line == *"$opt="* ]] && arg==1
    status=0
    if [ -n "$verb" ]; then
      out=$("$prog" "$verb" "$opt$arg" "${extra[@]}" 2>&1 >/dev/null \
        </dev/null) || status=$?
    else
      out=$("$prog" "$opt$arg" 2>&1 >/dev/null) || status=$?
    fi
    if [ "$status" -eq 2 ] &&
      grep -qE -- "(option $opt does not apply|\`$opt.*\` before the command)" \
        <<<"$out"; then
      continue
    elif [ "$status" -eq 0 ] || { [ "$status" -eq 2 ] &&
      ! grep -qE 'unrecognized|requires an argument|allow an argument' \
        <<<"$out"; }; then
      echo "$opt"
    else
      echo "$prog ${verb:-(no command)} $opt$arg: exit $status: $out" >&2
      return 1
    fi
  done < <("$prog" --help | sed -nE '/^(.* )?[Oo]ptions( .*)?:$/,/^$/p' |
    grep -E '^ +(-[A-Za-z], +)?--')
}

@test "dsec-run and dsec-vm: the completion offers each command the options it accepts" {
  local prog verb accepted offered
  for prog in dsec-run dsec-vm; do
    for verb in "" $(help_commands "$prog"); do
      accepted=$(dsec_run_accepted "$prog" "$verb" | LC_ALL=C sort -u)
      [ -n "$accepted" ]
      offered=$(complete_line "$prog $verb${verb:+ }--" | LC_ALL=C sort -u)
      same_set "$prog ${verb:-(no command)}" "accepted options" "$accepted" \
        "completed options" "$offered"
    done
  done
  # the probe tells options apart (it does not find every option accepted)
  [ -z "$(dsec_run_accepted dsec-run kill | grep -x -- --force)" ]
  dsec_run_accepted dsec-run rm | grep -qx -- --force
  dsec_run_accepted dsec-vm rm | grep -qx -- --force
}

@test "dsec-run and dsec-vm: the completion offers ids and names from DSEC_ROOT" {
  local offered verb prog
  mkdir -p "$DSEC_ROOT/sandboxes/sb-0123456789abcdef" "$DSEC_ROOT/names"
  echo sb-0123456789abcdef >"$DSEC_ROOT/names/rollout-17"
  for prog in dsec-run dsec-vm; do
    for verb in exec inspect events rm kill; do
      offered=$(complete_line "$prog $verb " | LC_ALL=C sort)
      same_set "$prog $verb" expected "$(printf '%s\n' rollout-17 \
        sb-0123456789abcdef)" offered "$offered"
    done
  done
  [ "$(complete_line "dsec-run exec rollout-17 ")" = -- ]
  [ -z "$(complete_line "dsec-run exec rollout-17 -- ")" ]
  [ -z "$(complete_line "dsec-run exec rollout-17 -- --")" ]
  complete_line "dsec-run kill rollout-17 " | grep -qx TERM
  # session ls|rm ID: the subcommand, then the sandbox
  same_set "dsec-run session" expected "$(printf '%s\n' ls rm)" offered \
    "$(complete_line "dsec-run session " | LC_ALL=C sort)"
  same_set "dsec-run session rm" expected "$(printf '%s\n' rollout-17 \
    sb-0123456789abcdef)" offered "$(complete_line "dsec-run session rm " | LC_ALL=C sort)"
  [ -z "$(complete_line "dsec-run session ls rollout-17 ")" ]
  # --session takes a value: the ID after it is still the first argument
  [ "$(complete_line "dsec-run exec --session s rollout-17 ")" = -- ]
  [ "$(complete_line "dsec-run create --backend=f")" = fncall ]
}

# The backends --backend=B offers in PROG --help ("microvm (default) or
# vm"), one per line, sorted.
help_backends() {
  "$1" --help | sed -n 's/^ *--backend=B *//p' |
    sed -e 's/(default)//' -e 's/ or / /g' -e 's/,/ /g' | tr -s ' ' '\n' |
    grep . | LC_ALL=C sort
}

@test "dsec-vm's completion offers its backends, dsec-run's all four" {
  local prog form help offered
  [ "$(help_backends dsec-vm)" = "$(printf '%s\n' microvm vm)" ]
  [ "$(help_backends dsec-run)" = "$(printf '%s\n' container fncall microvm vm)" ]
  for prog in dsec-vm dsec-run; do
    help=$(help_backends "$prog")
    for form in "create --backend=" "create --backend " "run --backend=" \
      "pool --backend "; do
      offered=$(complete_line "$prog $form" | LC_ALL=C sort)
      same_set "$prog $form" "--help backends" "$help" offered "$offered"
    done
  done
  [ "$(complete_line "dsec-vm create --backend=m")" = microvm ]
  [ "$(complete_line "dsec-run create --backend=c")" = container ]
  # one shell with both loaded (dsec-vm's file loads dsec-run's): the
  # program is told by the command word, also when it is a path
  # shellcheck disable=SC1090,SC1091
  source "$DSEC_SRCDIR/completions/bash/dsec-vm"
  COMP_LINE="/usr/local/bin/dsec-vm create --backend="
  COMP_POINT=${#COMP_LINE}
  COMPREPLY=()
  _dsec_run
  same_set "path to dsec-vm" expected "$(printf '%s\n' microvm vm)" \
    offered "$(printf '%s\n' "${COMPREPLY[@]}" | LC_ALL=C sort)"
  COMP_LINE="dsec-run create --backend="
  COMP_POINT=${#COMP_LINE}
  COMPREPLY=()
  _dsec_run
  same_set "dsec-run after dsec-vm" expected \
    "$(printf '%s\n' container fncall microvm vm)" \
    offered "$(printf '%s\n' "${COMPREPLY[@]}" | LC_ALL=C sort)"
}

@test "the completions parse" {
  local prog
  for prog in "${PROGS[@]}"; do
    run -0 bash -n "$DSEC_SRCDIR/completions/bash/$prog"
  done
}

# Each completion file must stand alone (bash-completion loads one per
# command), so both carry the same helpers; whichever is loaded last wins.
# dsec-vm's file carries none: it loads dsec-run's, installed beside it.
@test "the completions share the same helper functions" {
  helpers() {
    sed -n '/^_dsec_comp_init()/,/^}/p; /^_dsec_comp_reply()/,/^}/p;
      /^_dsec_comp_paths()/,/^}/p' "$1"
  }
  [ -z "$(helpers "$DSEC_SRCDIR/completions/bash/dsec-vm")" ]
  [ -n "$(helpers "$DSEC_SRCDIR/completions/bash/dsec-pull")" ]
  diff <(helpers "$DSEC_SRCDIR/completions/bash/dsec-pull") \
    <(helpers "$DSEC_SRCDIR/completions/bash/dsec-layer")
  diff <(helpers "$DSEC_SRCDIR/completions/bash/dsec-pull") \
    <(helpers "$DSEC_SRCDIR/completions/bash/dsec-run")
  diff <(helpers "$DSEC_SRCDIR/completions/bash/dsec-pull") \
    <(helpers "$DSEC_SRCDIR/completions/bash/dsec-place")
  diff <(helpers "$DSEC_SRCDIR/completions/bash/dsec-pull") \
    <(helpers "$DSEC_SRCDIR/completions/bash/dsec-reap")
}

@test "each program is linked with full RELRO: its symbols bound at start, its GOT read-only" {
  local p f
  command -v readelf >/dev/null || skip "needs readelf (binutils)"
  for p in "${PROGS[@]}"; do
    f=$(command -v "$p")
    # a supervisor, init and fncall's calls are forks that never exec:
    # bound lazily, each call would bind (and copy) what init had not
    readelf -d "$f" | grep -E 'FLAGS(_1)?' | grep -qw NOW || {
      echo "$p is bound lazily" >&2
      return 1
    }
    readelf -lW "$f" | grep -qw GNU_RELRO || {
      echo "$p has no RELRO segment" >&2
      return 1
    }
  done
}
