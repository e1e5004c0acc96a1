#!/usr/bin/env bash
# Cross-checks `atoll check-history` with the independent adya checker (an Elle-style
# rw-register checker from crates.io) on every history the test suite saved. Both verdicts
# must agree; the suite saves at least one history of a deliberately broken protocol, so
# "not serializable" is exercised too.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-target/tmp/histories}
atoll=${CARGO_TARGET_DIR:-target}/release/atoll
n=0; bad=0; broken_seen=0
shopt -s nullglob
for h in "$dir"/*.jsonl; do
  case "$h" in *.adya.jsonl) continue;; esac
  out="${h%.jsonl}.adya.jsonl"
  set +e
  "$atoll" check-history "$h" --adya "$out" > "${h%.jsonl}.atoll.txt"
  ours=$?
  adya check -m rw-register -c serializable "$out" --transaction-order "${out%.jsonl}.order.json" > "${h%.jsonl}.adya.txt" 2>&1
  theirs=$?
  set -e
  verdict() { case $1 in 0) echo serializable;; 1) echo "not serializable";; *) echo "error $1";; esac; }
  printf '%-60s atoll: %-17s adya: %s\n' "$(basename "$h")" "$(verdict $ours)" "$(verdict $theirs)"
  n=$((n + 1))
  if [ "$ours" != "$theirs" ]; then bad=$((bad + 1)); fi
  case "$h" in *broken*) [ "$ours" = 1 ] && broken_seen=1;; esac
done
if [ "$n" = 0 ]; then echo "no histories in $dir" >&2; exit 1; fi
if [ "$broken_seen" = 0 ]; then echo "no broken-protocol history was caught" >&2; exit 1; fi
if [ "$bad" != 0 ]; then echo "$bad of $n verdicts disagree" >&2; exit 1; fi
echo "adya agrees with atoll check-history on all $n histories"
