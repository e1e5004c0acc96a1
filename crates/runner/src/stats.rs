//! Per-worker statistics gathered by the coordinator co-routines, merged after a run.

use atoll_fabric::VerbCounters;
use atoll_txn::{Abort, Stage};
use hdrhistogram::Histogram;
use serde::Serialize;

/// Median and extremes of one figure over the runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Spread {
    pub min: f64,
    pub max: f64,
    /// (max - min) / median; 0 when the median is 0.
    pub relative: f64,
}

/// The median of `xs` (mean of the middle two for an even count), with its spread.
pub fn median_and_spread(xs: &[f64]) -> (f64, Spread) {
    if xs.is_empty() {
        return (0.0, Spread::default());
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    let median = if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    };
    let (min, max) = (v[0], v[v.len() - 1]);
    let relative = if median == 0.0 {
        0.0
    } else {
        (max - min) / median
    };
    (median, Spread { min, max, relative })
}

/// Latencies are recorded in nanoseconds, up to a minute, to 3 significant digits.
pub const LATENCY_NS_MAX: u64 = 60_000_000_000;
const LATENCY_SIGFIG: u8 = 3;

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_NS_MAX, LATENCY_SIGFIG).expect("valid histogram bounds")
}

/// What the committed transactions of one type touched, summed over the measured window
/// (from each one's [`atoll_txn::Footprint`]): the report's measured workload fidelity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Touched {
    /// Committed transactions that touched a record on another node than their
    /// coordinator's.
    pub remote_txns: u64,
    pub records: u64,
    pub reads: u64,
    pub writes: u64,
    pub remote_records: u64,
}

impl Touched {
    pub fn add(&mut self, f: atoll_txn::Footprint) {
        self.remote_txns += (f.remote_records > 0) as u64;
        self.records += f.records as u64;
        self.reads += f.reads as u64;
        self.writes += f.writes as u64;
        self.remote_records += f.remote_records as u64;
    }

    pub fn merge(&mut self, o: &Touched) {
        self.remote_txns += o.remote_txns;
        self.records += o.records;
        self.reads += o.reads;
        self.writes += o.writes;
        self.remote_records += o.remote_records;
    }
}

/// What one progress interval saw on one worker (an `atoll cluster` node sends each to its
/// coordinator as it closes).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Interval {
    pub index: u64,
    pub committed: u64,
    pub aborted: u64,
    /// Aborted attempts by reason (`Abort::index`).
    pub aborts: [u64; Abort::COUNT],
    #[serde(with = "histogram_buckets")]
    pub latency_ns: Histogram<u64>,
    /// What the run's budget held when the worker closed the interval.
    pub memory_bytes: u64,
}

impl Interval {
    pub fn count_abort(&mut self, a: Abort) {
        self.aborted += 1;
        self.aborts[a.index()] += 1;
    }

    pub fn new(index: u64) -> Self {
        Interval {
            index,
            committed: 0,
            aborted: 0,
            aborts: [0; Abort::COUNT],
            latency_ns: new_histogram(),
            memory_bytes: 0,
        }
    }
}

/// A sequenced protocol's lanes (CALVIN's), in the measured window: per lane and epoch its
/// phases, and per transaction the parts of its latency. Sums, so merging is exact.
#[derive(Clone, Copy, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SeqStats {
    /// Epochs lanes passed the barrier of (one per lane and epoch).
    pub lane_epochs: u64,
    /// From an epoch's start to its barrier's end, summed over lane epochs.
    pub epoch_ns: u64,
    /// Requests the lanes dispatched.
    pub requests: u64,
    /// Collecting the epoch's requests (the lane's sequencer window).
    pub sequence_ns: u64,
    /// Sending the batch to every node (and the input replicas).
    pub dispatch_ns: u64,
    /// From the dispatch's end to the lane's share of the epoch done: the wait for every
    /// node's batch, locks, forwarded values, and executing.
    pub run_ns: u64,
    /// Idle at the barrier: from the lane's share done until every node said EPOCH_DONE.
    pub barrier_ns: u64,
    /// Transactions executed, counted on every executing node (a multi-partition one on
    /// each active participant).
    pub executions: u64,
    /// Per recorded transaction: from its arrival until a lane took it in order (its epoch's
    /// collection, dispatch, the other nodes' batches and the transactions before it).
    pub txns: u64,
    pub queued_ns: u64,
    /// Its locks granted, its own records read and forwarded, the others' values awaited.
    pub forward_ns: u64,
    /// Its logic and its local writes.
    pub execute_ns: u64,
    /// Requests whose records a reconnaissance read found before they were sequenced.
    #[serde(default)]
    pub reconnaissance: u64,
    /// Recorded transactions run in an epoch's second pass (CALVIN's `lane` order: each
    /// conflicted with an earlier lane's).
    #[serde(default)]
    pub second_pass: u64,
    /// Transactions sequenced again: their records changed since their reconnaissance
    /// (Calvin's OLLP, `keys_changed`).
    #[serde(default)]
    pub sequenced_again: u64,
}

impl SeqStats {
    pub fn merge(&mut self, o: &SeqStats) {
        let SeqStats {
            lane_epochs,
            epoch_ns,
            requests,
            sequence_ns,
            dispatch_ns,
            run_ns,
            barrier_ns,
            executions,
            txns,
            queued_ns,
            forward_ns,
            execute_ns,
            reconnaissance,
            second_pass,
            sequenced_again,
        } = *o;
        self.lane_epochs += lane_epochs;
        self.epoch_ns += epoch_ns;
        self.requests += requests;
        self.sequence_ns += sequence_ns;
        self.dispatch_ns += dispatch_ns;
        self.run_ns += run_ns;
        self.barrier_ns += barrier_ns;
        self.executions += executions;
        self.txns += txns;
        self.queued_ns += queued_ns;
        self.forward_ns += forward_ns;
        self.execute_ns += execute_ns;
        self.reconnaissance += reconnaissance;
        self.second_pass += second_pass;
        self.sequenced_again += sequenced_again;
    }
}

/// Statistics of one worker (all its co-routines).
#[derive(Clone)]
pub struct WorkerStats {
    /// Per transaction type, in the measured window.
    pub committed: Vec<u64>,
    pub latency_ns: Vec<Histogram<u64>>,
    /// Aborted attempts per type and reason, in the measured window.
    pub aborts: Vec<[u64; Abort::COUNT]>,
    /// Transactions whose logic chose to abort (complete outcomes, like TPC-C's rolled-back
    /// new-orders), per type.
    pub user_aborted: Vec<u64>,
    /// Transactions abandoned after `attempts_max` attempts or a final abort, by the reason
    /// of their last attempt.
    pub gave_up: [u64; Abort::COUNT],
    /// What committed transactions touched, per type, in the measured window.
    pub touched: Vec<Touched>,
    /// Stage time of committed transactions (their final attempt), summed.
    pub stage_ns: [u64; Stage::COUNT],
    /// A sequenced protocol's epochs and phases (zero for the others).
    pub seq: SeqStats,
    /// Committed transactions (warm-up included) that had read a payload failing its check.
    pub committed_torn_reads: u64,
    /// Committed transactions over the whole run, warm-up included.
    pub committed_all: u64,
    pub verbs_at_start: Option<VerbCounters>,
    pub verbs_at_end: Option<VerbCounters>,
    pub interval: Interval,
}

impl WorkerStats {
    pub fn new(types: usize) -> Self {
        WorkerStats {
            committed: vec![0; types],
            latency_ns: (0..types).map(|_| new_histogram()).collect(),
            aborts: vec![[0; Abort::COUNT]; types],
            user_aborted: vec![0; types],
            gave_up: [0; Abort::COUNT],
            touched: vec![Touched::default(); types],
            stage_ns: [0; Stage::COUNT],
            seq: SeqStats::default(),
            committed_torn_reads: 0,
            committed_all: 0,
            verbs_at_start: None,
            verbs_at_end: None,
            interval: Interval::new(0),
        }
    }

    pub fn record_latency(h: &mut Histogram<u64>, ns: u64) {
        h.saturating_record(ns.clamp(1, LATENCY_NS_MAX));
    }

    /// Measured-window verb counters of this worker.
    pub fn window_verbs(&self) -> VerbCounters {
        let (Some(a), Some(b)) = (&self.verbs_at_start, &self.verbs_at_end) else {
            return VerbCounters::default();
        };
        let mut d = b.clone();
        for i in 0..atoll_fabric::VerbKind::COUNT {
            d.remote_ops[i] -= a.remote_ops[i];
            d.remote_bytes[i] -= a.remote_bytes[i];
            d.local_ops[i] -= a.local_ops[i];
        }
        d.doorbells -= a.doorbells;
        d.round_trips -= a.round_trips;
        d.rpcs_served -= a.rpcs_served;
        d
    }
}

/// The statistics of a node's workers, or of several nodes, merged: what a node's summary
/// carries to the driver. Sums and histograms, so merging is exact and in any order.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct NodeStats {
    /// Per transaction type, in the measured window.
    pub committed: Vec<u64>,
    #[serde(with = "histogram_vec")]
    pub latency_ns: Vec<Histogram<u64>>,
    pub aborts: Vec<[u64; Abort::COUNT]>,
    pub user_aborted: Vec<u64>,
    /// Transactions given up, by the reason of their last attempt.
    pub gave_up: [u64; Abort::COUNT],
    pub touched: Vec<Touched>,
    pub stage_ns: [u64; Stage::COUNT],
    #[serde(default)]
    pub seq: SeqStats,
    pub committed_torn_reads: u64,
    pub committed_all: u64,
    /// Verb counters of the measured window.
    pub verbs: VerbCounters,
}

impl NodeStats {
    pub fn new(types: usize) -> Self {
        let w = WorkerStats::new(types);
        NodeStats {
            committed: w.committed,
            latency_ns: w.latency_ns,
            aborts: w.aborts,
            user_aborted: w.user_aborted,
            gave_up: [0; Abort::COUNT],
            touched: w.touched,
            stage_ns: [0; Stage::COUNT],
            seq: SeqStats::default(),
            committed_torn_reads: 0,
            committed_all: 0,
            verbs: VerbCounters::default(),
        }
    }

    /// Adds one worker's statistics (its measured-window verbs among them).
    pub fn add_worker(&mut self, w: &WorkerStats) {
        self.merge(&NodeStats {
            committed: w.committed.clone(),
            latency_ns: w.latency_ns.clone(),
            aborts: w.aborts.clone(),
            user_aborted: w.user_aborted.clone(),
            gave_up: w.gave_up,
            touched: w.touched.clone(),
            stage_ns: w.stage_ns,
            seq: w.seq,
            committed_torn_reads: w.committed_torn_reads,
            committed_all: w.committed_all,
            verbs: w.window_verbs(),
        });
    }

    /// Adds another node's (or nodes') statistics.
    pub fn merge(&mut self, o: &NodeStats) {
        assert_eq!(
            o.committed.len(),
            self.committed.len(),
            "statistics of workloads with different transaction types merged"
        );
        for t in 0..self.committed.len() {
            self.committed[t] += o.committed[t];
            self.latency_ns[t]
                .add(&o.latency_ns[t])
                .expect("same histogram bounds");
            for r in 0..Abort::COUNT {
                self.aborts[t][r] += o.aborts[t][r];
            }
            self.user_aborted[t] += o.user_aborted[t];
            self.touched[t].merge(&o.touched[t]);
        }
        for (acc, n) in self.gave_up.iter_mut().zip(o.gave_up) {
            *acc += n;
        }
        self.committed_torn_reads += o.committed_torn_reads;
        self.committed_all += o.committed_all;
        for (acc, ns) in self.stage_ns.iter_mut().zip(o.stage_ns) {
            *acc += ns;
        }
        self.seq.merge(&o.seq);
        self.verbs.merge(&o.verbs);
    }
}

/// A list of histograms, each as [`histogram_buckets`].
pub mod histogram_vec {
    use super::Histogram;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    struct One(#[serde(with = "super::histogram_buckets")] Histogram<u64>);

    pub fn serialize<S: Serializer>(hs: &[Histogram<u64>], s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(hs.iter().map(|h| One(h.clone())))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Histogram<u64>>, D::Error> {
        Ok(Vec::<One>::deserialize(d)?
            .into_iter()
            .map(|o| o.0)
            .collect())
    }
}

/// A histogram as its recorded buckets, for per-node summaries that cross process
/// boundaries. Lossless for
/// every query a report makes: each bucket's count is recorded again at the bucket's highest
/// equivalent value, which falls in the same bucket, so counts, quantiles, min, max and mean
/// of the rebuilt histogram, and of any merge of rebuilt ones, equal the original's.
pub mod histogram_buckets {
    use super::{new_histogram, Histogram};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    /// One non-empty bucket: its highest equivalent value and its count.
    #[derive(Serialize, Deserialize)]
    struct Bucket(u64, u64);

    pub fn serialize<S: Serializer>(h: &Histogram<u64>, s: S) -> Result<S::Ok, S::Error> {
        let buckets: Vec<Bucket> = h
            .iter_recorded()
            .map(|v| Bucket(v.value_iterated_to(), v.count_at_value()))
            .collect();
        buckets.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Histogram<u64>, D::Error> {
        let buckets = Vec::<Bucket>::deserialize(d)?;
        let mut h = new_histogram();
        for Bucket(value, count) in buckets {
            h.record_n(value, count).map_err(|e| {
                serde::de::Error::custom(format!(
                    "histogram bucket at {value} ns out of bounds: {e:?}"
                ))
            })?;
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_fabric::rng::Rng;

    #[derive(serde::Serialize, serde::Deserialize)]
    struct Wrapped(#[serde(with = "histogram_buckets")] Histogram<u64>);

    #[test]
    fn stats_histograms_merged_after_a_json_round_trip_equal_the_in_memory_merge() {
        const PARTS: u64 = 4;
        const VALUES_PER_PART: u64 = 5_000;
        let mut rng = Rng::new(8);
        let parts: Vec<Histogram<u64>> = (0..PARTS)
            .map(|p| {
                let mut h = new_histogram();
                for _ in 0..VALUES_PER_PART {
                    // Spread over many orders of magnitude, per part differently.
                    let ns = 1 + rng.below(1_000 << (4 * p));
                    WorkerStats::record_latency(&mut h, ns);
                }
                h
            })
            .collect();
        let mut direct = new_histogram();
        let mut via_json = new_histogram();
        for h in &parts {
            direct.add(h).unwrap();
            let json = serde_json::to_string(&Wrapped(h.clone())).unwrap();
            let back: Wrapped = serde_json::from_str(&json).unwrap();
            via_json.add(&back.0).unwrap();
        }
        assert_eq!(direct.len(), via_json.len());
        assert_eq!(direct.min(), via_json.min());
        assert_eq!(direct.max(), via_json.max());
        assert_eq!(direct.mean(), via_json.mean());
        for q in [0.0, 0.1, 0.5, 0.9, 0.99, 0.999, 1.0] {
            assert_eq!(
                direct.value_at_quantile(q),
                via_json.value_at_quantile(q),
                "quantile {q}"
            );
        }
    }
}
