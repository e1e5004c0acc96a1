#!/bin/bash
# 1000 seeded simulated RSI (or PROTOCOL=namdb) runs with faults per workload on shared-data, each history checked as SI
# (PLAN=rpc: every stage a request to a CPU, the Figure 6 baselines; V=n: n versions per record;
# EXTRA: further flags, e.g. EXTRA="--vector-slots node --vector-fetcher" for NAM-DB;
# WORKLOADS: which, default "smallbank ycsb checkout tpcc cycle").
B=${B:-target/release/atoll}
F="spikes=3,spike_us=50,spike_len_us=300,pauses=2,pause_us=200,tear_words=2,tear_ns=1000,stall_permille=50,stall_us=50"
N=${N:-1000}
for w in ${WORKLOADS:-smallbank ycsb checkout tpcc cycle}; do
  D=0.002
  case $w in
    smallbank) P="-p accounts=40 -p hot_accounts=4 -p hot_prob=0.9";;
    ycsb) P="-p records=60 -p hot_fraction=0.1 -p hot_prob=0.5 -p write_fraction=0.4 -p ops_per_txn=4 -p record_bytes=128";;
    checkout) P="-p products=40 -p product_bytes=128 -p quantity_max=100 -p orders_max=2000";;
    # Transactions of ~40 records: a longer run for as many commits.
    tpcc) P="-p customers_per_district=30 -p items=100 -p new_orders_max=50"; D=0.02;;
    cycle) P="-p pairs=6 -p record_words=3 -p ranges=2 -p range_keys=8 -p dyn_slots=10";;
  esac
  ok=0; bad=0; committed=0; cycles=0
  for s in $(seq 1 $N); do
    if [ $((s % 2)) = 1 ]; then SHAPE="--memory-nodes 2 --compute-nodes 2"; else SHAPE="--memory-nodes 1 --compute-nodes 3 --ts-node own"; fi
    out=$($B bench --fabric sim --net edr-ib --faults $F --workload $w --protocol ${PROTOCOL:-rsi} --plan ${PLAN:-one-sided} --rsi-versions ${V:-1} --architecture shared-data $SHAPE --threads 2 --coroutines 4 --duration $D --warmup 0.0005 --seed $s $P ${EXTRA} --history ${OUT:-/tmp}/h.jsonl 2>&1); rc=$?
    c=$(echo "$out" | grep -oP '\(\K[0-9]+(?= committed)' | head -1)
    si=$($B check-history ${OUT:-/tmp}/h.jsonl --isolation snapshot 2>&1); src=$?
    $B check-history ${OUT:-/tmp}/h.jsonl >/dev/null 2>&1 || cycles=$((cycles+1))
    if [ $rc = 0 ] && [ $src = 0 ]; then ok=$((ok+1)); committed=$((committed+${c:-0})); else bad=$((bad+1)); echo "FAIL $w seed $s rc=$rc si=$src"; echo "$out" | grep -E "FAIL|error" | head -3; echo "$si" | tail -3; fi
  done
  echo "$w: $ok clean, $bad failed, $committed committed, $cycles histories not serializable (write skew SI allows)"
done
