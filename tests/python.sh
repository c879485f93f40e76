#!/bin/sh
# make check: the Python SDK's tests (python/tests/, unittest), as TAP.
# Those that need root skip without it, with the reason.
set -u
command -v python3 >/dev/null || { echo "1..0 # SKIP needs python3"; exit 0; }
PYTHONDONTWRITEBYTECODE=1 exec python3 \
  "${DSEC_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/python/tests/tap.py" "$@"
