#!/usr/bin/env bash
# Issue-10 figures: the hardware-islands microbenchmark (Porobic et al., DaMoN'16 Fig 3 and 8)
# on in-process nodes. Real threads: the numbers depend on the machine and its load (the
# header prints `uptime`); repeat runs with REPEAT=N (median of N, --repeat).
#
# Table 1 (Fig 3): µs of process CPU per committed transaction (env.cpu_us_per_txn) on
#   NODES=4 nodes x 1 thread, for rows 2..100, local (multisite 0) vs multisite (1),
#   read-only vs update, one-sided vs rpc plans; also tx/s and abort %.
# Table 2 (Fig 8's shape; scale-up vs scale-out): 1 node x 2 threads vs 2 nodes x 1 thread
#   at 0, 25, 50 and 100% multisite, read-only and update, ROWS2 rows per transaction.
#   On one node every row is home's, so its "multisite" transactions stay local.
# Table 3 (Fig 8, the sensitivity analysis): 2 nodes x 1 thread, SENS_ROWS_PER_NODE rows per
#   node (the paper's 200,000 rows split between 2 instances), variant=sensitivity:
#   read-only (2 rows read) and read-write (1 local row updated, 1 row read) transactions,
#   distributed (the read row on the other node) at 0..100%; tx/s normalised to each
#   kind's 0% figure, and abort %.
# TABLES="1 2 3" picks the tables (default all); BIN=path/to/atoll uses that binary (default:
# build this tree).
#
# OS_THREADS=1 carries every worker on one OS thread (--os-threads): an RPC is then served
#   without waiting for another OS thread to be scheduled, which on a busy machine (load above
#   the cores) costs a scheduler time slice per round trip and swamps the rpc columns.
#
#   PROTOCOL=waitdie DURATION=1 WARMUP=0.3 ROWS="2 10 20 50 100" scripts/figures-micro.sh
set -euo pipefail
cd "$(dirname "$0")/.."
proto=${PROTOCOL:-waitdie}   # the seed notes' choice for Shore-MT's 2PL: WAITDIE
nodes=${NODES:-4}; coroutines=${COROUTINES:-4}
dur=${DURATION:-1}; warm=${WARMUP:-0.3}; repeat=${REPEAT:-1}
rows_list=${ROWS:-2 10 20 50 100}; rows2=${ROWS2:-10}
rows_per_node=${ROWS_PER_NODE:-10000}   # the paper's 10,000 rows per site
sens_rows_per_node=${SENS_ROWS_PER_NODE:-100000}   # Fig 8: 200,000 rows over 2 instances
sens_fractions=${SENS_FRACTIONS:-0 0.01 0.05 0.1 0.2 0.5 1}
tables=${TABLES:-1 2 3}
want() { case " $tables " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
out=${OUT:-target/figures-micro}
target=${CARGO_TARGET_DIR:-target}
mkdir -p "$out"
if [ -z "${BIN:-}" ]; then
  cargo build --release -q
  BIN=$target/release/atoll
fi
echo "# $(uptime)"
echo "# os threads ${OS_THREADS:-one per core}, protocol $proto, $coroutines co-routines per thread, ${dur} s (+${warm} s warm-up), rows_per_node $rows_per_node, median of $repeat"

# One run; prints "cpu_us tx/s abort%" of its JSON (the median run's with --repeat).
cell() {
  local f="$out/$1.json"; shift
  local rep=()
  if [ "$repeat" -gt 1 ]; then rep=(--repeat "$repeat"); fi
  if [ -n "${OS_THREADS:-}" ]; then rep+=(--os-threads "$OS_THREADS"); fi
  "$BIN" bench --workload micro --protocol "$proto" --coroutines "$coroutines" \
    --duration "$dur" --warmup "$warm" -p rows_per_node="${CELL_ROWS_PER_NODE:-$rows_per_node}" \
    "$@" "${rep[@]}" --quiet --json "$f" > /dev/null
  python3 - "$f" <<'PY'
import json, statistics, sys
r = json.load(open(sys.argv[1]))
runs = r.get('repeats', [r])
for run in runs:
    assert run['passed'], [c for c in run['checks'] if not c['passed']]
pick = lambda k: statistics.median(k(x) for x in runs)
cpu = pick(lambda x: x['env']['cpu_us_per_txn'] or 0.0)
tps = pick(lambda x: x['summary']['committed_per_s'])
ab = pick(lambda x: 100 * x['summary']['abort_rate'])
rem = pick(lambda x: 100 * x['summary']['fidelity']['remote_fraction'])
print('%8.1f %9.0f %5.1f %5.1f' % (cpu, tps, ab, rem), end='')
PY
}

if want 1; then
echo
echo "## Table 1: $nodes nodes x 1 thread; cells: CPU us/txn, tx/s, abort %, remote % (measured)"
printf '%-6s %-10s %-9s' kind plan type
for r in $rows_list; do printf ' | %29s' "rows=$r"; done; echo
for kind in read update; do
  for plan in one-sided rpc; do
    for ms in 0 1; do
      t=local; [ "$ms" = 1 ] && t=multisite
      printf '%-6s %-10s %-9s' $kind $plan $t
      for r in $rows_list; do
        printf ' | '
        cell "t1-$kind-$plan-$t-$r" --nodes "$nodes" --threads 1 --plan $plan \
          -p kind=$kind -p rows=$r -p multisite_fraction=$ms
      done
      echo
    done
  done
done

fi

if want 2; then
echo
echo "## Table 2: rows=$rows2; cells: CPU us/txn, tx/s, abort %, remote % (measured)"
printf '%-6s %-10s %-14s' kind plan shape
for ms in 0 0.25 0.5 1; do printf ' | %29s' "multisite=$ms"; done; echo
for kind in read update; do
  for plan in one-sided rpc; do
    for shape in "1 2" "2 1"; do
      set -- $shape
      printf '%-6s %-10s %-14s' $kind $plan "$1 node x $2 thr"
      for ms in 0 0.25 0.5 1; do
        printf ' | '
        cell "t2-$kind-$plan-$1x$2-$ms" --nodes "$1" --threads "$2" --plan $plan \
          -p kind=$kind -p rows=$rows2 -p multisite_fraction=$ms
      done
      echo
    done
  done
done
fi

if want 3; then
echo
echo "## Table 3 (Fig 8): 2 nodes x 1 thread, variant=sensitivity, $sens_rows_per_node rows per node; cells: tx/s normalised to the kind's 0% figure, abort %, CPU us/txn"
printf '%-6s %-10s' kind plan
for ms in $sens_fractions; do printf ' | %22s' "dist=$ms"; done; echo
for kind in read update; do
  for plan in one-sided rpc; do
    printf '%-6s %-10s' $kind $plan
    base=
    for ms in $sens_fractions; do
      v=$(CELL_ROWS_PER_NODE=$sens_rows_per_node cell "t3-$kind-$plan-$ms" --nodes 2 --threads 1 \
        --plan $plan -p variant=sensitivity -p kind=$kind -p multisite_fraction=$ms)
      set -- $v   # cpu tx/s abort remote
      [ -z "$base" ] && base=$2
      printf ' | %7.3f %5.1f %7.1f' "$(python3 -c "print($2 / max($base, 1e-9))")" "$3" "$1"
    done
    echo
  done
done
fi
