#!/usr/bin/env bash
# Cross-checks `atoll check-history` with the independent adya checker (an Elle-style
# rw-register checker from crates.io) on every history the test suite saved, at the
# isolation level its header line names.
#
# Serializable histories: both verdicts must agree; the suite saves at least one history of
# a deliberately broken protocol, so "not serializable" is exercised too.
#
# Snapshot-isolation histories (`"isolation":"snapshot"`: a snapshot-isolation protocol's,
# and the hand-built `si-sample-*` of crates/bench/tests/all/si_samples.rs) go to
# `check-history --isolation snapshot` and to adya's `snapshot-isolation` model (G1, G-SI,
# G-nonadjacent, and ww/wr cycles extended by one rw edge, over the version order our
# export gives it). Ours judges from each attempt's snapshot and commit timestamps, which
# adya never sees, so it is the stricter one: whatever adya rejects ours must reject, but
# ours may reject alone (a stale read, a read from the future, a blind lost update leave no
# cycle). At least one SI history must be rejected by both, so adya's side is exercised.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-target/tmp/histories}
# `BIN=path/to/atoll` (the CI's is target/ci/atoll), else the release build.
atoll=${BIN:-${CARGO_TARGET_DIR:-target}/release/atoll}
if [ ! -x "$atoll" ]; then echo "no atoll binary at $atoll (build it, or set BIN)" >&2; exit 1; fi
n=0; bad=0; broken_seen=0; si_n=0; si_both=0; si_ours_only=0
shopt -s nullglob
verdict() { case $1 in 0) echo "$2";; 1) echo "not $2";; *) echo "error $1";; esac; }
for h in "$dir"/*.jsonl; do
  case "$h" in *.adya.jsonl) continue;; esac
  out="${h%.jsonl}.adya.jsonl"
  # The header's level; version-2 files name none (every protocol then was serializable).
  isolation=serializable
  if head -n 1 "$h" | grep -q '"isolation":"snapshot"'; then isolation=snapshot; fi
  case $isolation in
    snapshot) model=snapshot-isolation; level="SI";;
    *) model=serializable; level=serializable;;
  esac
  set +e
  "$atoll" check-history "$h" --isolation "$isolation" --adya "$out" > "${h%.jsonl}.atoll.txt"
  ours=$?
  adya check -m rw-register -c "$model" "$out" --transaction-order "${out%.jsonl}.order.json" > "${h%.jsonl}.adya.txt" 2>&1
  theirs=$?
  set -e
  note=""
  n=$((n + 1))
  if [ "$isolation" = snapshot ]; then
    si_n=$((si_n + 1))
    if [ "$ours" = 1 ] && [ "$theirs" = 1 ]; then si_both=$((si_both + 1)); fi
    if [ "$ours" = 1 ] && [ "$theirs" = 0 ]; then
      si_ours_only=$((si_ours_only + 1)); note="  (timestamps only)"
    elif [ "$ours" != "$theirs" ]; then
      bad=$((bad + 1))
    fi
  elif [ "$ours" != "$theirs" ]; then
    bad=$((bad + 1))
  fi
  printf '%-60s atoll: %-21s adya: %s%s\n' "$(basename "$h")" "$(verdict $ours $level)" "$(verdict $theirs $level)" "$note"
  case "$h" in *broken*) [ "$ours" = 1 ] && broken_seen=1;; esac
done
if [ "$n" = 0 ]; then echo "no histories in $dir" >&2; exit 1; fi
failed=0
if [ "$bad" != 0 ]; then echo "$bad of $n verdicts disagree" >&2; failed=1; fi
if [ "$broken_seen" = 0 ]; then echo "no broken-protocol history was caught" >&2; failed=1; fi
if [ "$si_n" != 0 ] && [ "$si_both" = 0 ]; then
  echo "no snapshot-isolation history was rejected by both checkers" >&2; failed=1
fi
if [ "$failed" != 0 ]; then exit 1; fi
echo "adya agrees with atoll check-history on all $n histories ($si_n snapshot-isolation, $si_ours_only of them rejected by timestamps alone)"
