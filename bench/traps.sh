# Sourced by the bench scripts once they have defined cleanup(): it runs
# on any exit, and INT, TERM and HUP exit with the shell's usual statuses
# (130, 143, 129), which run it too.
# shellcheck shell=bash
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
