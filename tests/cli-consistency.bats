#!/usr/bin/env bats
# --help, the man page and the bash completion of each program must tell
# the same story: the same long options, and for dsec-layer and dsec-run
# the same commands, each option offered for the commands it applies to
# (dsec-layer and dsec-place: as --help says; dsec-run: as dsec-run itself
# answers).
# An option added to --help without a man page entry and a completion
# fails here.

load helpers/common

bats_require_minimum_version 1.5.0

PROGS=(dsec-pull dsec-layer dsec-run dsec-place dsec-reap)

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

# The tag lines (the line after each .TP) of a section, as plain text.
man_tags() {
  man_section "$1" "$2" | awk 'tp { print; tp = 0 } /^\.TP/ { tp = 1 }' |
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
  local prog help man comp
  for prog in "${PROGS[@]}"; do
    help=$(help_options "$prog")
    man=$(man_options "$DSEC_SRCDIR/man/$prog.1")
    comp=$(completion_options "$DSEC_SRCDIR/completions/bash/$prog")
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

  prog=dsec-run
  offered=$(for cmd in "" $(help_commands "$prog"); do
    complete_line "$prog $cmd${cmd:+ }--"
  done | LC_ALL=C sort -u)
  help=$(help_options "$prog")
  same_set "$prog" --help "$help" "completion of '$prog CMD --'" "$offered"
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
  # exec and run pass the command's status through
  tags=$(man_tags "$DSEC_SRCDIR/man/dsec-run.1" "EXIT STATUS" |
    sed 's/^\.[A-Z]* //')
  for code in 124 125 126 127 128+N; do
    grep -qx "$code" <<<"$tags" ||
      { echo "dsec-run.1: exit status $code not listed" >&2; false; }
  done
}

@test "every command of --help is in the man page and the completion" {
  local prog help man comp
  for prog in dsec-layer dsec-run dsec-place; do
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

# The options dsec-run accepts for VERB ("" for before the command), one
# per line, sorted, found by asking dsec-run: each option of --help is
# given alone (with a value when --help shows one), with arguments the
# command rejects, so nothing is ever run.  "does not apply" (or, before
# the command, "before the command") means refused; exit 0 (--help,
# --version) or another usage error means accepted; anything else fails.
dsec_run_accepted() {
  local verb=$1 line opt arg out status
  local -a extra=()
  case $verb in create | ps | pool) extra=(an-argument) ;; esac
  while IFS= read -r line; do
    opt=$(grep -oE -- '--[a-z][a-z-]*' <<<"$line" | head -n1)
    arg=
    [[ $line == *"$opt="* ]] && arg==1
    status=0
    if [ -n "$verb" ]; then
      out=$(dsec-run "$verb" "$opt$arg" "${extra[@]}" 2>&1 >/dev/null \
        </dev/null) || status=$?
    else
      out=$(dsec-run "$opt$arg" 2>&1 >/dev/null) || status=$?
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
      echo "dsec-run ${verb:-(no command)} $opt$arg: exit $status: $out" >&2
      return 1
    fi
  done < <(dsec-run --help | sed -nE '/^(.* )?[Oo]ptions( .*)?:$/,/^$/p' |
    grep -E '^ +(-[A-Za-z], +)?--')
}

@test "dsec-run: the completion offers each command the options it accepts" {
  local verb accepted offered
  for verb in "" $(help_commands dsec-run); do
    accepted=$(dsec_run_accepted "$verb" | LC_ALL=C sort -u)
    [ -n "$accepted" ]
    offered=$(complete_line "dsec-run $verb${verb:+ }--" | LC_ALL=C sort -u)
    same_set "dsec-run ${verb:-(no command)}" "accepted options" "$accepted" \
      "completed options" "$offered"
  done
  # the probe tells options apart (it does not find every option accepted)
  [ -z "$(dsec_run_accepted kill | grep -x -- --force)" ]
  dsec_run_accepted rm | grep -qx -- --force
}

@test "dsec-run: the completion offers ids and names from DSEC_ROOT" {
  local offered verb
  mkdir -p "$DSEC_ROOT/sandboxes/sb-0123456789abcdef" "$DSEC_ROOT/names"
  echo sb-0123456789abcdef >"$DSEC_ROOT/names/rollout-17"
  for verb in exec inspect events rm kill; do
    offered=$(complete_line "dsec-run $verb " | LC_ALL=C sort)
    same_set "dsec-run $verb" expected "$(printf '%s\n' rollout-17 \
      sb-0123456789abcdef)" offered "$offered"
  done
  [ "$(complete_line "dsec-run exec rollout-17 ")" = -- ]
  [ -z "$(complete_line "dsec-run exec rollout-17 -- ")" ]
  [ -z "$(complete_line "dsec-run exec rollout-17 -- --")" ]
  complete_line "dsec-run kill rollout-17 " | grep -qx TERM
  [ "$(complete_line "dsec-run create --backend=f")" = fncall ]
}

@test "the completions parse" {
  local prog
  for prog in "${PROGS[@]}"; do
    run -0 bash -n "$DSEC_SRCDIR/completions/bash/$prog"
  done
}

# Each completion file must stand alone (bash-completion loads one per
# command), so both carry the same helpers; whichever is loaded last wins.
@test "the completions share the same helper functions" {
  helpers() {
    sed -n '/^_dsec_comp_init()/,/^}/p; /^_dsec_comp_reply()/,/^}/p;
      /^_dsec_comp_paths()/,/^}/p' "$1"
  }
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
