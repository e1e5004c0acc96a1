#!/bin/bash
# The serializable protocols on shared-data: N seeded simulated runs with faults each, history checked serializable.
B=${B:-target/release/atoll}
F="spikes=3,spike_us=50,spike_len_us=300,pauses=2,pause_us=200,tear_words=2,tear_ns=1000,stall_permille=50,stall_us=50"
N=${N:-200}
for p in nowait waitdie occ mvcc sundial; do
 for w in smallbank ycsb; do
  case $w in smallbank) P="-p accounts=40 -p hot_accounts=4 -p hot_prob=0.9";; ycsb) P="-p records=200 -p write_fraction=0.4 -p ops_per_txn=4 -p record_bytes=128";; esac
  ok=0; bad=0; committed=0
  for s in $(seq 1 $N); do
    if [ $((s % 2)) = 1 ]; then SHAPE="--memory-nodes 2 --compute-nodes 2"; else SHAPE="--memory-nodes 1 --compute-nodes 3"; fi
    out=$($B bench --fabric sim --net edr-ib --faults $F --workload $w --protocol $p --architecture shared-data $SHAPE --threads 2 --coroutines 4 --duration 0.002 --warmup 0.0005 --seed $s $P --history ${OUT:-/tmp}/hs.jsonl 2>&1); rc=$?
    c=$(echo "$out" | grep -oP '\(\K[0-9]+(?= committed)' | head -1)
    $B check-history ${OUT:-/tmp}/hs.jsonl >/dev/null 2>&1; src=$?
    if [ $rc = 0 ] && [ $src = 0 ]; then ok=$((ok+1)); committed=$((committed+${c:-0})); else bad=$((bad+1)); echo "FAIL $p $w seed $s rc=$rc hist=$src"; fi
  done
  echo "$p $w: $ok clean, $bad failed, $committed committed"
 done
done
