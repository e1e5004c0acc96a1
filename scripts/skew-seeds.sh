#!/bin/bash
# The write-skew probe (`--workload skew`: doctors on call, pairs x + y >= 0 across two
# nodes) over N seeded simulated runs with faults per protocol, shared-data (2 memory + 2
# compute nodes): per protocol, the histories that are not serializable (a dependency
# cycle: `check-history`), the runs whose own check saw a withdraw read its pair below
# zero, and for the snapshot-isolation protocols that every history is SI-clean
# (`check-history --isolation snapshot`). SI allows write skew; a serializable protocol must
# show none. PROTOCOLS picks them (default: rsi namdb and the five serializable ones).
B=${B:-target/release/atoll}
F="spikes=3,spike_us=50,spike_len_us=300,pauses=2,pause_us=200,tear_words=2,tear_ns=1000,stall_permille=50,stall_us=50"
N=${N:-100}
H=${OUT:-/tmp}/skew-h.jsonl
for p in ${PROTOCOLS:-rsi namdb nowait waitdie occ mvcc sundial}; do
  si=0; [ $p = rsi ] || [ $p = namdb ] && si=1
  ok=0; bad=0; cycles=0; seen=0; committed=0
  for s in $(seq 1 $N); do
    out=$($B bench --fabric sim --net edr-ib --faults $F --workload skew --protocol $p \
      --architecture shared-data --memory-nodes 2 --compute-nodes 2 --threads 2 --coroutines 4 \
      --duration 0.003 --warmup 0.0005 --seed $s --history $H 2>&1); rc=$?
    c=$(echo "$out" | grep -oP '\(\K[0-9]+(?= committed)' | head -1)
    committed=$((committed+${c:-0}))
    echo "$out" | grep -q "write skew observed" && seen=$((seen+1))
    $B check-history $H >/dev/null 2>&1; src=$?
    [ $src = 1 ] && cycles=$((cycles+1))
    if [ $si = 1 ]; then $B check-history $H --isolation snapshot >/dev/null 2>&1; ck=$?; else ck=$src; fi
    if [ $rc = 0 ] && [ $ck = 0 ]; then ok=$((ok+1)); else bad=$((bad+1)); echo "FAIL $p seed $s rc=$rc check=$ck"; fi
  done
  echo "$p: $ok clean, $bad failed, $committed committed; $cycles histories not serializable, $seen runs saw a withdraw read its pair below zero"
done
