#!/usr/bin/env bash
# Issue-2 figures: 2 nodes x 1 thread x 8 co-routines, NOWAIT and OCC x {one-sided, rpc},
# SmallBank and YCSB (RCC defaults). Repeats each run and prints the median of each metric.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${REPS:-3}
dur=${DURATION:-5}
out=${OUT:-target/figures-core}
mkdir -p "$out"
cargo build --release -q
printf '%-10s %-7s %-10s %14s %10s %10s\n' workload proto plan "committed/s" "abort%" "p99us"
for w in smallbank ycsb; do
  for p in nowait occ; do
    for plan in one-sided rpc; do
      for r in $(seq 1 "$reps"); do
        ./target/release/atoll bench --workload $w --protocol $p --plan $plan --nodes 2 --threads 1 \
          --coroutines 8 --duration "$dur" --warmup 1 --seed $r --quiet --json "$out/$w-$p-$plan-$r.json" >/dev/null
      done
      python3 - "$out" "$w" "$p" "$plan" "$reps" <<'PY'
import json, statistics, sys
out, w, p, plan, reps = sys.argv[1:]
rs = [json.load(open(f"{out}/{w}-{p}-{plan}-{r}.json")) for r in range(1, int(reps) + 1)]
med = lambda f: statistics.median(f(r) for r in rs)
print(f"{w:<10} {p:<7} {plan:<10} {med(lambda r: r['summary']['committed_per_s']):>14.0f} "
      f"{100 * med(lambda r: r['summary']['abort_rate']):>10.2f} {med(lambda r: r['summary']['latency_us']['p99']):>10.1f}")
PY
    done
  done
done
