#!/usr/bin/env bash
# Instructions per committed transaction on the transaction path: callgrind counts only
# inside the workers' co-routine polls and event loops (loading and the driver excluded),
# divided by the run's committed transactions. Usage: BINARY [atoll bench flags...]; use
# --warmup 0 so every committed transaction is counted.
set -euo pipefail
bin=$1; shift
out=$(mktemp -d)
valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" --collect-atstart=no \
  --toggle-collect='atoll_fabric::core::Executor::run_ready*' \
  --toggle-collect='atoll_fabric::core::WorkerCore::progress*' \
  "$bin" bench "$@" --quiet --json "$out/r.json" >/dev/null 2>"$out/err" || { cat "$out/err"; exit 1; }
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
c = json.load(open(f"{out}/r.json"))["summary"]["committed"]
t = int(open(f"{out}/cg.out").read().split("totals:")[1].split()[0])
print(f"committed {c}, instructions {t}, per committed transaction {t // max(c, 1)}")
PY
echo "profile: $out/cg.out (callgrind_annotate it)"
