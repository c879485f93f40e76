#!/bin/sh
# make check: a brief libFuzzer run (FUZZ_CHECK_SECONDS, default 5) of every
# fuzz target, when configure found clang with libFuzzer; TAP.  The corpora
# themselves are replayed by tests/fuzz/replay-NAME, with or without clang.
set -u
if [ "${DSEC_FUZZ:-no}" != yes ]; then
  echo "1..0 # SKIP ${DSEC_FUZZ_MISSING:-no clang with libFuzzer}"
  exit 0
fi
# shellcheck disable=SC2086
set -- $DSEC_FUZZ_TARGETS
echo "1..$#"
i=0 rc=0
for t; do
  i=$((i + 1))
  if out=$(sh "$DSEC_SRCDIR/tests/fuzz/run-fuzz" brief \
    "$DSEC_BUILDDIR/tests/fuzz/fuzz-$t" "$DSEC_SRCDIR/tests/fuzz/corpus/$t" \
    "${FUZZ_CHECK_SECONDS:-5}"); then
    echo "ok $i - $out"
  else
    printf 'not ok %s - %s\n' "$i" "$out"
    rc=1
  fi
done
exit $rc
