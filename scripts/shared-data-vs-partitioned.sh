#!/bin/bash
# Partitioned vs shared-data on the same simulated cores: 4 nodes x 2 threads, 64 co-routines
# in all (partitioned: 8 per thread on every node; shared-data: 16 per thread on 2 compute nodes).
B=${B:-target/release/atoll}
J=${OUT:-/tmp}/r.json
sum() { python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); s=r["summary"]; v=r["verbs"]; x=v.get("rpcs_served_by_role") or {}; print("%9.0f tx/s aborts %5.1f%% rt/txn %5.2f %s%s" % (s["committed_per_s"], s["abort_rate"]*100, v["round_trips_per_txn"], "PASS" if r["passed"] else "FAIL", (" mem-served %d" % x["memory_nodes"]) if x else ""))' $J; }
for w in smallbank checkout; do
  case $w in smallbank) P="";; checkout) P="-p products=100000";; esac
  for p in occ nowait waitdie mvcc sundial rsi; do
    for plan in one-sided rpc; do
      [ $p = rsi ] && [ $plan = rpc ] && continue
      $B bench --fabric sim --net edr-ib --workload $w $P --protocol $p --plan $plan --nodes 4 --threads 2 --coroutines 8 --duration 0.02 --warmup 0.005 --seed 1 --quiet --json $J >/dev/null 2>&1 || { echo "$w $p $plan partitioned: failed"; continue; }
      a=$(sum)
      $B bench --fabric sim --net edr-ib --workload $w $P --protocol $p --plan $plan --architecture shared-data --memory-nodes 2 --compute-nodes 2 --threads 2 --coroutines 16 --duration 0.02 --warmup 0.005 --seed 1 --quiet --json $J >/dev/null 2>&1 || { echo "$w $p $plan shared: failed"; continue; }
      b=$(sum)
      printf "%-9s %-7s %-9s | partitioned %s | shared-data %s\n" $w $p $plan "$a" "$b"
    done
  done
done
