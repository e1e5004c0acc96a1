#!/bin/bash
# NAM-DB's TPC-C with and without locality in the simulator (seed-mechanisms.md claims 23-24;
# the slides' Fig 6): fdr-ib, N memory + N compute nodes, WAREHOUSES per memory node, standard
# mix. Without locality every record is across the network; with --colocate compute node i
# shares memory node i's machine, works on its warehouses (home_of) and reaches them with the
# CPU's own loads, stores and atomics; remote warehouses (the mix's remote Payments and
# supplying warehouses) and the timestamp vector stay across the network. BASELINE="nowait occ":
# also the partitioned protocols' two-sided 2PC (--plan rpc) on N nodes (claim 25).
B=${B:-target/release/atoll}
J=${OUT:-/tmp}/locality.json
PROTOCOL=${PROTOCOL:-namdb}
W=${WAREHOUSES:-4}
for n in ${NODES:-2 4 8}; do
  for colocate in "" "--colocate"; do
    $B bench --fabric sim --net fdr-ib --workload tpcc -p warehouses=$W ${PARAMS} \
      --protocol $PROTOCOL ${EXTRA} --log-replicas ${LOG:-0} --architecture shared-data --memory-nodes $n --compute-nodes $n $colocate \
      --threads ${THREADS:-4} --coroutines ${COROUTINES:-4} --duration ${DUR:-0.004} --warmup 0.001 --seed 1 --quiet --json $J >/dev/null 2>&1 || { echo "$n nodes $colocate: failed"; continue; }
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); s=r["summary"]; n=int(sys.argv[2]); print("%-6s %2d+%-2d %-11s %9.0f tx/s (%8.0f per compute node), NewOrder %5.1f%%, aborts %5.1f%%, p50 %6.1f us, %s" % (sys.argv[4], n, n, sys.argv[3] or "apart", s["committed_per_s"], s["committed_per_s"]/n, 100*[t["committed"] for t in r["txn_types"] if t["name"]=="new_order"][0]/max(s["committed"],1), s["abort_rate"]*100, s["latency_us"]["p50"], "PASS" if r["passed"] else "FAIL"))' $J $n "$colocate" $PROTOCOL
  done
  for p in ${BASELINE}; do
    $B bench --fabric sim --net fdr-ib --workload tpcc -p warehouses=$W ${PARAMS} --protocol $p --plan rpc --log-replicas ${LOG:-0} --nodes $n \
      --threads ${THREADS:-4} --coroutines ${COROUTINES:-4} --duration ${DUR:-0.004} --warmup 0.001 --seed 1 --quiet --json $J >/dev/null 2>&1 || { echo "$p $n nodes: failed"; continue; }
    python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); s=r["summary"]; n=int(sys.argv[2]); print("%-6s %2d    partitioned %9.0f tx/s (%8.0f per node), aborts %5.1f%%, p50 %6.1f us, %s" % (sys.argv[3]+"/rpc", n, s["committed_per_s"], s["committed_per_s"]/n, s["abort_rate"]*100, s["latency_us"]["p50"], "PASS" if r["passed"] else "FAIL"))' $J $n $p
  done
done
