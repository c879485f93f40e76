# Shared by bench/state.sh and bench/vm.sh (sourced): timing and the
# p50/p99 table rows.

command -v bc >/dev/null || apt-get install -y -q bc >/dev/null

# us START: microseconds since START (a `date +%s%N` reading)
us() { echo $(( ($(date +%s%N) - $1) / 1000 )); }

rows=()
# stat NAME VALUES(us...): appends a row with p50 and p99 in ms; P50 and
# P99 are left set (us) for ratios
stat() {
  local name=$1; shift
  local sorted
  sorted=$(printf '%s\n' "$@" | sort -n)
  P50=$(sed -n "$(( ($# + 1) / 2 ))p" <<<"$sorted")
  P99=$(sed -n "$(( ($# * 99 + 99) / 100 ))p" <<<"$sorted")
  rows+=("$(printf '%-40s %10.2f %10.2f' "$name" "$(bc -l <<<"$P50/1000")" "$(bc -l <<<"$P99/1000")")")
}

# ratio_row NAME A50 A99 B50 B99: a row with A/B at p50 and at p99.
ratio_row() {
  rows+=("$(printf '%-40s %9.2fx %9.2fx' "$1" "$(bc -l <<<"$2/$4")" "$(bc -l <<<"$3/$5")")")
}
