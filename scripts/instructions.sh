#!/usr/bin/env bash
# Instructions per committed transaction on the transaction path: callgrind counts only
# inside the workers' co-routine polls and event loops (loading and the driver excluded),
# divided by the run's committed transactions. Usage: BINARY [atoll bench flags...]; use
# --warmup 0 so every committed transaction is counted. Generating the workload's inputs
# (keys, zipf draws) is counted apart: it is the benchmark's cost, not the engine's.
set -euo pipefail
bin=$1; shift
out=$(mktemp -d)
valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" --collect-atstart=no \
  --toggle-collect='atoll_fabric::core::Executor::run_ready*' \
  --toggle-collect='atoll_fabric::core::WorkerCore::progress*' \
  "$bin" bench "$@" --quiet --json "$out/r.json" >/dev/null 2>"$out/err" || { cat "$out/err"; exit 1; }
callgrind_annotate --inclusive=yes --threshold=100 "$out/cg.out" >"$out/incl.txt" 2>/dev/null
python3 - "$out" <<'PY'
import json, re, sys
out = sys.argv[1]
c = max(json.load(open(f"{out}/r.json"))["summary"]["committed"], 1)
t = int(open(f"{out}/cg.out").read().split("totals:")[1].split()[0])
# Inlining splits a function over several lines; its largest inclusive count is the whole.
gen = max([int(m.group(1).replace(",", "")) for m in
           re.finditer(r"^\s*([\d,]+) .*Workload>::generate", open(f"{out}/incl.txt").read(), re.M)] or [0])
print(f"committed {c}, instructions {t}, per committed transaction {t // c}: "
      f"input generation {gen // c}, engine {(t - gen) // c}")
PY
echo "profile: $out/cg.out (callgrind_annotate it)"
