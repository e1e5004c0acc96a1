#!/usr/bin/env bash
# Issue-9 wall-clock figures: OLD and NEW binaries interleaved run by run (the machine's
# noise hits both alike), median of REPS, each beside the memory floor measured in the
# same session (`atoll floor`, also with `--index-probe`: each record found through a hash
# index first). Usage: OLD NEW. Run on an idle machine (check `uptime`).
# Shapes: YCSB 1 node x 2 threads x 1 co-routine, 2 M records, 16 ops, 10% writes, zipf 0.6,
# no compute, no log backups, OCC one-sided, at 104 and 1000 bytes; SmallBank OCC
# 2 nodes x 1 thread x 8 co-routines, one-sided and rpc (and NOWAIT rpc). Each run's report carries the
# cross-core round trip measured before and after it (env.core_round_trip_ns_*), listed per run.
set -euo pipefail
old=$1 new=$2
reps=${REPS:-5}
dur=${DURATION:-5}
out=${OUT:-target/figures-lean}
mkdir -p "$out"
ycsb="--workload ycsb --nodes 1 --threads 2 --coroutines 1 -p records=2000000 -p ops_per_txn=16
      -p write_fraction=0.1 -p distribution=zipfian -p zipf_theta=0.6 -p compute_us=0
      --replicas 1 --protocol occ --plan one-sided"
sb="--workload smallbank --nodes 2 --threads 1 --coroutines 8 --protocol occ"
shapes=("ycsb104|$ycsb -p record_bytes=104" "ycsb1000|$ycsb -p record_bytes=1000"
        "sb-one-sided|$sb --plan one-sided" "sb-rpc|$sb --plan rpc"
        "sb-rpc-nowait|${sb/--protocol occ/--protocol nowait} --plan rpc")
for r in $(seq 1 "$reps"); do
  for s in "${shapes[@]}"; do
    name=${s%%|*} flags=${s#*|}
    for which in old new; do
      bin=$old; [ $which = new ] && bin=$new
      # shellcheck disable=SC2086
      "$bin" bench $flags --duration "$dur" --warmup 1 --seed "$r" --quiet --json "$out/$name-$which-$r.json" >/dev/null
    done
  done
  "$new" floor --records 2000000 --record-bytes 104 --accesses 16 --threads 2 --duration 3 --json "$out/floor104-$r.json" >/dev/null
  "$new" floor --records 2000000 --record-bytes 1000 --accesses 16 --threads 2 --duration 3 --json "$out/floor1000-$r.json" >/dev/null
  # The same, each record found through a hash index first (a dependent miss, as the
  # engine's index probe is): the floor of a store that must look its records up.
  "$new" floor --records 2000000 --record-bytes 104 --accesses 16 --threads 2 --duration 3 --index-probe --json "$out/floor104i-$r.json" >/dev/null
  "$new" floor --records 2000000 --record-bytes 1000 --accesses 16 --threads 2 --duration 3 --index-probe --json "$out/floor1000i-$r.json" >/dev/null
  # SmallBank: 2 nodes x 100,000 accounts x 3 tables of small records; the issue's floor
  # counts ~12 cold memory operations per transaction (index, lock, read, validate, write,
  # unlock of 1-3 records).
  "$new" floor --records 600000 --record-bytes 64 --accesses 12 --threads 2 --duration 3 --json "$out/floorsb-$r.json" >/dev/null
done
python3 - "$out" "$reps" "$dur" <<'PY'
import json, statistics, sys
out, reps, dur = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
med = statistics.median
def runs(name, which):
    rs = []
    for r in range(1, reps + 1):
        j = json.load(open(f"{out}/{name}-{which}-{r}.json"))
        rs.append((j["summary"]["committed_per_s"], j["env"].get("cpu_us_per_txn") or float("nan"),
                   j["env"].get("core_round_trip_ns_start"), j["env"].get("core_round_trip_ns_end")))
    return rs
floor = {b: med(json.load(open(f"{out}/floor{b}-{r}.json"))["tx_per_s"] for r in range(1, reps + 1))
         for b in (104, 1000, "sb", "104i", "1000i")}
print(f"{'shape':<14} {'old tx/s':>10} {'new tx/s':>10} {'new/old':>8} {'old us':>7} {'new us':>7} {'spread new':>10} {'floor tx/s':>11} {'new/floor':>9} {'idx floor':>10} {'new/idx':>7}")
for name in ("ycsb104", "ycsb1000", "sb-one-sided", "sb-rpc", "sb-rpc-nowait"):
    o, n = runs(name, "old"), runs(name, "new")
    mo, mn = med(x[0] for x in o), med(x[0] for x in n)
    spread = (max(x[0] for x in n) - min(x[0] for x in n)) / mn
    fl = floor[104 if name == "ycsb104" else 1000 if name == "ycsb1000" else "sb"]
    fls = f"{fl:>11.0f} {mn / fl:>9.2f}" if fl else f"{'':>11} {'':>9}"
    fi = floor.get({"ycsb104": "104i", "ycsb1000": "1000i"}.get(name))
    if fi:
        fls += f" {fi:>10.0f} {mn / fi:>7.2f}"
    print(f"{name:<14} {mo:>10.0f} {mn:>10.0f} {mn / mo:>8.2f} {med(x[1] for x in o):>7.2f} {med(x[1] for x in n):>7.2f} {100 * spread:>9.1f}% {fls}")
# The cross-core round trip before each run (binaries that measure it): RPC plans move
# with it, so each run is listed beside it.
for name in ("sb-one-sided", "sb-rpc", "sb-rpc-nowait"):
    n = runs(name, "new")
    print(f"{name} new runs, tx/s @ cross-core round trip ns before>after:",
          ", ".join(f"{x[0] / 1e3:.0f}K@{x[2]:.0f}>{x[3]:.0f}" if x[2] and x[3] else f"{x[0] / 1e3:.0f}K" for x in n))
# Medians of the new runs per cross-core regime: both probes under FAST_NS (the vCPUs close)
# or both over SLOW_NS (far apart); a run whose probes disagree straddled a move and counts
# in neither.
FAST_NS, SLOW_NS = 150, 250
for name in ("ycsb104", "ycsb1000", "sb-one-sided", "sb-rpc", "sb-rpc-nowait"):
    n = [x for x in runs(name, "new") if x[2] and x[3]]
    fast = [x[0] for x in n if max(x[2], x[3]) < FAST_NS]
    slow = [x[0] for x in n if min(x[2], x[3]) > SLOW_NS]
    show = lambda xs: f"{med(xs):.0f} (n={len(xs)}, spread {100 * (max(xs) - min(xs)) / med(xs):.1f}%)" if xs else "-"
    print(f"{name} new by regime: fast {show(fast)}, slow {show(slow)}")
print("(tx/s: medians of", reps, "interleaved runs of", dur, "s; us: process CPU per committed transaction over the measured window;"
      " spread = (max - min) / median of the new runs)")
PY
