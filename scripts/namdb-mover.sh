#!/bin/bash
# What NAM-DB's overflow area and version mover buy, in the simulator: "snapshot too old"
# aborts and reads served from the overflow area against its size (entries per record) and
# the mover's interval. edr-ib, 2 memory + 2 compute nodes, the detached fetcher (snapshots a
# little older than the vector), records of 2 versions (the head and one old one).
# WORKLOADS: tpcc (the standard mix: StockLevel and OrderStatus read at their snapshot over
# several round trips) and ycsb (16 operations, 10% writes, 1% hot records taking half the
# accesses). OVERFLOW and INTERVALS pick the grid; KEEP sets --overflow-keep-us (the garbage
# collector's least keep; it always writes over only entries no live snapshot needs).
B=${B:-target/release/atoll}
J=${OUT:-/tmp}/mover.json
for w in ${WORKLOADS:-tpcc ycsb}; do
  case $w in
    tpcc) P="-p customers_per_district=30 -p items=1000 -p new_orders_max=200"; D=0.05;;
    ycsb) P="-p records=1000 -p write_fraction=0.1 -p record_bytes=128 -p ops_per_txn=16 -p hot_fraction=0.01 -p hot_prob=0.5"; D=0.02;;
  esac
  for ov in ${OVERFLOW:-0 2 8}; do
    for iv in ${INTERVALS:-1000 100 10}; do
      if [ "$ov" = 0 ]; then
        [ "$iv" = "${INTERVALS%% *}" ] || [ -z "$INTERVALS" -a "$iv" = 1000 ] || continue
        EX=""
      else
        EX="--overflow-versions $ov --mover-interval-us $iv ${KEEP:+--overflow-keep-us $KEEP}"
      fi
      $B bench --fabric sim --net edr-ib --workload $w $P --protocol namdb --rsi-versions 2 $EX \
        --vector-fetcher --architecture shared-data --memory-nodes 2 --compute-nodes 2 \
        --threads 2 --coroutines 4 --duration $D --warmup 0.001 --seed ${SEED:-1} --quiet --json $J \
        >/dev/null 2>&1 || { echo "$w overflow $ov interval $iv: failed"; continue; }
      python3 - "$J" "$w" "$ov" "$iv" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); s = r["summary"]; v = r.get("versions") or {}
ov = sys.argv[3]
print("%-5s overflow %s/record, mover %5s us: %8.0f tx/s, snapshot_too_old %5d, reads beyond kept %5d, updates behind %5d, chain walks %5d, served from overflow %5d, versions moved %6d (ring wrapped %d, entries reclaimed %d, waiting for a free entry %d), %s" % (
    sys.argv[2], ov, sys.argv[4] if ov != "0" else "-", s["committed_per_s"],
    s["aborts_by_reason"].get("snapshot_too_old", 0), v.get("reads_beyond_kept_versions", 0),
    v.get("updates_behind_kept_versions", 0), v.get("chain_walks", 0), v.get("reads_served_from_overflow", 0), v.get("versions_moved", 0),
    v.get("overflow_ring_wraps", 0), v.get("overflow_entries_reclaimed", 0),
    v.get("versions_waiting_for_a_free_entry", 0), "PASS" if r["passed"] else "FAIL"))
PY
    done
  done
done
