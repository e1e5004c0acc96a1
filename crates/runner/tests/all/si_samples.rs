//! Hand-built snapshot-isolation histories, checked here and saved (as `si-sample-*.jsonl`,
//! their header naming snapshot isolation) beside the protocols' histories, for
//! `.ci/adya-crosscheck` to compare our timestamp-based checker with adya's
//! black-box `snapshot-isolation` model: some anomalies both must catch, some only
//! timestamps reveal, and write skew neither may reject.

use atoll_check::{self as history, Mode, TxnRecord};
use atoll_storage::layout::LOADER_TAG;
use atoll_storage::TableId;
use atoll_txn::{HistOp, Isolation, WriteKind};

const X: u64 = 1;
const Y: u64 = 2;
const L: u64 = LOADER_TAG;

/// A committed attempt with its timestamps; its id is its tag, its process its own.
fn si(tag: u64, snapshot: u64, commit: Option<u64>, ops: Vec<HistOp>) -> TxnRecord {
    TxnRecord {
        id: tag,
        tag,
        attempt: 1,
        coord: tag as u32,
        aborted: None,
        start_ns: snapshot,
        end_ns: commit.unwrap_or(snapshot) + 1,
        snapshot: Some(snapshot),
        commit,
        snapshot_vector: None,
        commit_slot: None,
        lost: false,
        ops,
    }
}

fn r(key: u64, version: u64, tag: u64) -> HistOp {
    HistOp::Read {
        table: TableId(0),
        key,
        version,
        tag,
        intact: true,
    }
}

fn w(key: u64, version: u64) -> HistOp {
    HistOp::Write {
        table: TableId(0),
        key,
        version,
        kind: WriteKind::Update,
    }
}

/// Whether adya's `snapshot-isolation` can see the anomaly too (a cycle it infers from
/// values and the version order), or only timestamps reveal it.
#[derive(Debug, PartialEq)]
enum Expect {
    Passes,
    BothCatch,
    TimestampsOnly,
}

fn samples() -> Vec<(&'static str, Expect, Vec<TxnRecord>)> {
    vec![
        (
            // Write skew, a reader of both results, and an attempt that aborted.
            "write-skew",
            Expect::Passes,
            vec![
                si(1, 0, Some(10), vec![r(X, 1, L), r(Y, 1, L), w(X, 2)]),
                si(2, 0, Some(11), vec![r(X, 1, L), r(Y, 1, L), w(Y, 2)]),
                si(3, 11, None, vec![r(X, 2, 1), r(Y, 2, 2)]),
                TxnRecord {
                    aborted: Some("lock_busy".into()),
                    ..si(4, 11, None, vec![r(X, 2, 1)])
                },
            ],
        ),
        (
            // Both read the loaded x and overwrote it concurrently.
            "lost-update",
            Expect::BothCatch,
            vec![
                si(1, 0, Some(10), vec![r(X, 1, L), w(X, 2)]),
                si(2, 5, Some(20), vec![r(X, 1, L), w(X, 3)]),
            ],
        ),
        (
            // Each read the other's write.
            "g1c",
            Expect::BothCatch,
            vec![
                si(1, 0, Some(10), vec![r(Y, 2, 2), w(X, 2)]),
                si(2, 10, Some(20), vec![r(X, 2, 1), w(Y, 2)]),
            ],
        ),
        (
            // Snapshot 15 read x v1 although v2 committed at 10: T2 serializes before T1.
            "stale-read",
            Expect::TimestampsOnly,
            vec![
                si(1, 0, Some(10), vec![r(X, 1, L), w(X, 2)]),
                si(2, 15, None, vec![r(X, 1, L), r(Y, 1, L)]),
            ],
        ),
        (
            // Two concurrent blind writers of x: nothing read, no cycle to find.
            "blind-lost-update",
            Expect::TimestampsOnly,
            vec![
                si(1, 0, Some(10), vec![w(X, 2)]),
                si(2, 5, Some(20), vec![w(X, 3)]),
                si(3, 20, None, vec![r(X, 3, 2)]),
            ],
        ),
    ]
}

#[test]
fn si_samples_get_their_expected_verdicts_and_are_saved_for_the_adya_crosscheck() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("histories");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, expect, h) in samples() {
        let v = history::check(&h, Mode::Snapshot);
        assert_eq!(
            v.ok(),
            expect == Expect::Passes,
            "{name}:\n{}",
            history::render(&h, &v)
        );
        let text = history::to_text(&h, Isolation::Snapshot);
        assert_eq!(history::parse(&text).unwrap(), h, "{name} round-trips");
        std::fs::write(dir.join(format!("si-sample-{name}.jsonl")), text).unwrap();
    }
}
