//! Protocol scenarios on a 2-node in-process cluster, scripted step by step: each abort
//! reason is provoked and checked, under every plan.

use atoll_fabric::{Coroutine, NodeId};
use atoll_protocols::{Mvcc, NoWait, Occ, Sundial, WaitDie};
use atoll_storage::{Partition, TableId, TableSpec};
use atoll_testkit::{Steps, TestCluster};
use atoll_txn::{Plan, Primitive, Protocol, Txn};
use std::sync::{Arc, Mutex};

const T: TableId = TableId(0);
const KEYS_PER_NODE: u64 = 16;
/// A key on node 1, remote to coordinators on node 0.
const REMOTE_KEY: u64 = KEYS_PER_NODE + 3;

fn plans() -> Vec<Plan> {
    vec![
        Plan::uniform(Primitive::OneSided),
        Plan::uniform(Primitive::Rpc),
        Plan::parse("read=rpc,lock=one-sided,validate=one-sided,commit=one-sided,release=rpc")
            .unwrap(),
        Plan::parse("read=one-sided,lock=rpc,validate=rpc,log=rpc,commit=rpc,release=one-sided")
            .unwrap(),
    ]
}

fn cluster(plan: Plan, ordered: bool) -> TestCluster {
    cluster_locking(plan, ordered, atoll_storage::layout::LockWord::Owner, 1)
}

/// As `cluster`, with lock words in the format a protocol keeps (`Protocol::LOCK_WORD`) and
/// `version_slots` versions a record.
fn cluster_locking(
    plan: Plan,
    ordered: bool,
    lock_word: atoll_storage::layout::LockWord,
    version_slots: u32,
) -> TestCluster {
    let spec = TableSpec {
        name: "t".into(),
        payload_words: 1,
        capacity_per_node: 64,
        capacity_max_per_node: Some(64),
        partition: Partition::Range {
            keys_per_node: KEYS_PER_NODE,
        },
        ordered,
        // Every key of the node once at most.
        gone_keys_max_per_node: KEYS_PER_NODE as u32,
    };
    let c = TestCluster::with_layout(2, vec![spec], plan, 2, version_slots, lock_word);
    for s in &c.stores {
        let base = s.node.0 as u64 * KEYS_PER_NODE;
        for k in base..base + KEYS_PER_NODE {
            s.insert(T, k, &[100]).unwrap();
        }
    }
    c
}

type Log = Arc<Mutex<Vec<String>>>;

fn note(log: &Log, s: impl Into<String>) {
    log.lock().unwrap().push(s.into());
}

/// Runs two scripted transactions on node 0 (co-routines 0 and 1) and returns their notes.
fn two<F0, F1>(c: &TestCluster, t0: F0, t1: F1) -> Vec<String>
where
    F0: Fn(atoll_txn::Coordinator, Steps, Log) -> Coroutine + Sync,
    F1: Fn(atoll_txn::Coordinator, Steps, Log) -> Coroutine + Sync,
{
    let steps = Steps::default();
    let log: Log = Arc::default();
    c.run(&|core, k| {
        if core.id.node != NodeId(0) {
            return None;
        }
        let coord = c.coordinator(core, k);
        Some(match k {
            0 => t0(coord, steps.clone(), log.clone()),
            _ => t1(coord, steps.clone(), log.clone()),
        })
    });
    let v = log.lock().unwrap().clone();
    v
}

fn nowait_lock_busy(plan: Plan) {
    let c = cluster(plan, false);
    let notes = two(
        &c,
        |mut co, steps, log| {
            Box::pin(async move {
                let ep = co.ep.clone();
                let mut tx = Txn::<NoWait>::begin(&mut co);
                let v = tx
                    .read_for_update(T, REMOTE_KEY)
                    .await
                    .expect("first locker succeeds");
                tx.write(T, REMOTE_KEY, &[v[0] + 1]);
                steps.reach(1);
                steps.wait(&ep, 2).await;
                note(
                    &log,
                    format!("t0 commit {:?}", tx.commit().await.map(|_| ())),
                );
            })
        },
        |mut co, steps, log| {
            Box::pin(async move {
                let ep = co.ep.clone();
                steps.wait(&ep, 1).await;
                let mut tx = Txn::<NoWait>::begin(&mut co);
                let r = tx.read(T, REMOTE_KEY).await;
                note(&log, format!("t1 read {:?}", r.map(|_| ())));
                tx.rollback().await;
                steps.reach(2);
            })
        },
    );
    assert_eq!(
        notes,
        vec!["t1 read Err(LockBusy)", "t0 commit Ok(())"],
        "plan {plan}"
    );
    assert_eq!(c.payload(T, REMOTE_KEY), vec![101], "plan {plan}");
}

#[test]
fn nowait_second_locker_aborts_with_lock_busy_and_first_commits_2_nodes() {
    plans().into_iter().for_each(nowait_lock_busy);
}

fn occ_read_overwritten(plan: Plan) {
    let c = cluster(plan, false);
    let notes = two(
        &c,
        |mut co, steps, log| {
            Box::pin(async move {
                let ep = co.ep.clone();
                let mut tx = Txn::<Occ>::begin(&mut co);
                tx.read(T, REMOTE_KEY).await.unwrap();
                // A write elsewhere makes this a read-write transaction with a read-only entry.
                let v = tx.read_for_update(T, 1).await.unwrap();
                tx.write(T, 1, &[v[0] + 5]);
                steps.reach(1);
                steps.wait(&ep, 2).await;
                note(
                    &log,
                    format!("t0 commit {:?}", tx.commit().await.map(|_| ())),
                );
            })
        },
        |mut co, steps, log| {
            Box::pin(async move {
                let ep = co.ep.clone();
                steps.wait(&ep, 1).await;
                let mut tx = Txn::<Occ>::begin(&mut co);
                let v = tx.read_for_update(T, REMOTE_KEY).await.unwrap();
                tx.write(T, REMOTE_KEY, &[v[0] + 1]);
                note(
                    &log,
                    format!("t1 commit {:?}", tx.commit().await.map(|_| ())),
                );
                steps.reach(2);
            })
        },
    );
    assert_eq!(
        notes,
        vec!["t1 commit Ok(())", "t0 commit Err(ValidationFailed)"],
        "plan {plan}"
    );
    assert_eq!(c.payload(T, REMOTE_KEY), vec![101], "plan {plan}");
    assert_eq!(
        c.payload(T, 1),
        vec![100],
        "aborted write must not be installed (plan {plan})"
    );
}

#[test]
fn occ_read_overwritten_before_commit_fails_validation_2_nodes() {
    plans().into_iter().for_each(occ_read_overwritten);
}

fn occ_write_write(plan: Plan) {
    let c = cluster(plan, false);
    let notes = two(
        &c,
        |mut co, steps, log| {
            Box::pin(async move {
                let ep = co.ep.clone();
                let mut tx = Txn::<Occ>::begin(&mut co);
                let v = tx.read_for_update(T, REMOTE_KEY).await.unwrap();
                tx.write(T, REMOTE_KEY, &[v[0] + 10]);
                steps.reach(1);
                steps.wait(&ep, 2).await;
                note(
                    &log,
                    format!("t0 commit {:?}", tx.commit().await.map(|_| ())),
                );
            })
        },
        |mut co, steps, log| {
            Box::pin(async move {
                let ep = co.ep.clone();
                steps.wait(&ep, 1).await;
                let mut tx = Txn::<Occ>::begin(&mut co);
                let v = tx.read_for_update(T, REMOTE_KEY).await.unwrap();
                tx.write(T, REMOTE_KEY, &[v[0] + 1]);
                note(
                    &log,
                    format!("t1 commit {:?}", tx.commit().await.map(|_| ())),
                );
                steps.reach(2);
            })
        },
    );
    assert_eq!(
        notes,
        vec!["t1 commit Ok(())", "t0 commit Err(ValidationFailed)"],
        "plan {plan}"
    );
    assert_eq!(
        c.payload(T, REMOTE_KEY),
        vec![101],
        "no lost update (plan {plan})"
    );
}

#[test]
fn occ_write_write_conflict_aborts_the_later_committer_2_nodes() {
    plans().into_iter().for_each(occ_write_write);
}

/// A committing writer is simulated by taking the record's lock word with a raw CAS.
fn occ_locked_record(plan: Plan) {
    let c = cluster(plan, false);
    let ptr = c.record_ptr(T, REMOTE_KEY);
    const FOREIGN_TS: u64 = 0xABCD << 20;
    let notes = two(
        &c,
        |mut co, steps, log| {
            Box::pin(async move {
                let ep = co.ep.clone();
                assert_eq!(ep.cas(ptr.add(0), 0, FOREIGN_TS).await, Ok(0));
                steps.reach(1);
                steps.wait(&ep, 2).await;
                let mut tx = Txn::<Occ>::begin(&mut co);
                let r = tx.read(T, REMOTE_KEY).await;
                note(&log, format!("read of locked record {:?}", r.map(|_| ())));
                tx.rollback().await;
                assert_eq!(
                    ep.cas(ptr.add(0), FOREIGN_TS, 0).await,
                    Ok(FOREIGN_TS),
                    "the foreign lock was kept"
                );
            })
        },
        |mut co, steps, log| {
            Box::pin(async move {
                let ep = co.ep.clone();
                steps.wait(&ep, 1).await;
                let mut tx = Txn::<Occ>::begin(&mut co);
                let v = tx.read_for_update(T, REMOTE_KEY - 1).await.unwrap();
                tx.write(T, REMOTE_KEY - 1, &[v[0] + 1]);
                tx.write(T, REMOTE_KEY, &[7]);
                note(
                    &log,
                    format!(
                        "commit over locked record {:?}",
                        tx.commit().await.map(|_| ())
                    ),
                );
                steps.reach(2);
            })
        },
    );
    assert_eq!(
        notes,
        vec![
            "commit over locked record Err(LockBusy)",
            "read of locked record Err(Conflict)"
        ],
        "plan {plan}"
    );
    assert_eq!(c.payload(T, REMOTE_KEY - 1), vec![100], "plan {plan}");
    assert_eq!(c.payload(T, REMOTE_KEY), vec![100], "plan {plan}");
}

#[test]
fn occ_locked_record_aborts_readers_with_conflict_and_committers_with_lock_busy_2_nodes() {
    plans().into_iter().for_each(occ_locked_record);
}

fn insert_delete_scan<P: Protocol>(plan: Plan) {
    let c = cluster(plan, true);
    // Beyond the loaded keys, still on node 1 (range partitioning clamps to the last node).
    let new_key = 2 * KEYS_PER_NODE + 8;
    let notes = two(
        &c,
        move |mut co, _steps, log| {
            Box::pin(async move {
                let mut tx = Txn::<P>::begin(&mut co);
                tx.insert(T, new_key, &[5]);
                note(&log, format!("insert {:?}", tx.commit().await.map(|_| ())));
                let mut tx = Txn::<P>::begin(&mut co);
                tx.insert(T, new_key, &[6]);
                note(
                    &log,
                    format!("insert again {:?}", tx.commit().await.map(|_| ())),
                );
                let mut tx = Txn::<P>::begin(&mut co);
                let keys = tx
                    .scan(T, KEYS_PER_NODE + 8, new_key + 16, 3, false)
                    .await
                    .unwrap();
                note(&log, format!("scan {keys:?}"));
                let keys = tx
                    .scan(T, KEYS_PER_NODE, new_key + 16, 2, true)
                    .await
                    .unwrap();
                note(&log, format!("scan reverse {keys:?}"));
                tx.delete(T, new_key).await.unwrap();
                note(&log, format!("delete {:?}", tx.commit().await.map(|_| ())));
                let mut tx = Txn::<P>::begin(&mut co);
                note(
                    &log,
                    format!("read deleted {:?}", tx.read(T, new_key).await.map(|_| ())),
                );
                tx.rollback().await;
            })
        },
        |_co, _steps, _log| Box::pin(async {}),
    );
    let k = KEYS_PER_NODE;
    assert_eq!(
        notes,
        vec![
            "insert Ok(())".to_string(),
            "insert again Err(Duplicate)".into(),
            format!("scan [{}, {}, {}]", k + 8, k + 9, k + 10),
            format!("scan reverse [{new_key}, {}]", k + 15),
            "delete Ok(())".into(),
            "read deleted Err(NotFound)".into(),
        ],
        "{} plan {plan}",
        P::NAME
    );
}

#[test]
fn insert_duplicate_scan_delete_and_not_found_under_every_protocol_and_plan_2_nodes() {
    for plan in plans() {
        insert_delete_scan::<NoWait>(plan);
        insert_delete_scan::<Occ>(plan);
    }
}

fn cluster_versions(plan: Plan, slots: u32) -> TestCluster {
    let spec = TableSpec {
        name: "t".into(),
        payload_words: 1,
        capacity_per_node: 64,
        capacity_max_per_node: Some(64),
        partition: Partition::Range {
            keys_per_node: KEYS_PER_NODE,
        },
        ordered: false,
        gone_keys_max_per_node: KEYS_PER_NODE as u32,
    };
    let c = TestCluster::with_versions(2, vec![spec], plan, 2, slots);
    for s in &c.stores {
        let base = s.node.0 as u64 * KEYS_PER_NODE;
        for k in base..base + KEYS_PER_NODE {
            s.insert(T, k, &[100]).unwrap();
        }
    }
    c
}

/// Plans MVCC accepts (a one-sided write-back needs a one-sided lock).
fn mvcc_plans() -> Vec<Plan> {
    plans()
        .into_iter()
        .filter(|p| Mvcc::check_plan(p).is_ok())
        .collect()
}

/// Lets the other co-routine run for a while (it should stay blocked meanwhile).
async fn linger(ep: &atoll_fabric::Endpoint) {
    for _ in 0..200 {
        ep.yield_now().await;
    }
}

fn waitdie_older_waits(plan: Plan) {
    let c = cluster(plan, false);
    let notes = two(
        &c,
        |mut co, steps, log| {
            Box::pin(async move {
                let ep = co.ep.clone();
                // Older: begins first.
                let mut tx = Txn::<WaitDie>::begin(&mut co);
                steps.reach(1);
                steps.wait(&ep, 2).await;
                let r = tx.read(T, REMOTE_KEY).await.map(|v| v[0]);
                note(&log, format!("old read {r:?}"));
                tx.commit().await.unwrap();
            })
        },
        |mut co, steps, log| {
            Box::pin(async move {
                let ep = co.ep.clone();
                steps.wait(&ep, 1).await;
                let mut tx = Txn::<WaitDie>::begin(&mut co);
                let v = tx.read_for_update(T, REMOTE_KEY).await.unwrap();
                tx.write(T, REMOTE_KEY, &[v[0] + 1]);
                steps.reach(2);
                linger(&ep).await;
                note(
                    &log,
                    format!("young commit {:?}", tx.commit().await.map(|_| ())),
                );
            })
        },
    );
    assert_eq!(
        notes,
        vec!["young commit Ok(())", "old read Ok(101)"],
        "plan {plan}"
    );
}

fn waitdie_younger_dies(plan: Plan) {
    let c = cluster(plan, false);
    let notes = two(
        &c,
        |mut co, steps, log| {
            Box::pin(async move {
                let ep = co.ep.clone();
                let mut tx = Txn::<WaitDie>::begin(&mut co);
                tx.read_for_update(T, REMOTE_KEY).await.unwrap();
                steps.reach(1);
                steps.wait(&ep, 2).await;
                note(
                    &log,
                    format!("old commit {:?}", tx.commit().await.map(|_| ())),
                );
            })
        },
        |mut co, steps, log| {
            Box::pin(async move {
                let ep = co.ep.clone();
                steps.wait(&ep, 1).await;
                let mut tx = Txn::<WaitDie>::begin(&mut co);
                note(
                    &log,
                    format!("young read {:?}", tx.read(T, REMOTE_KEY).await.map(|_| ())),
                );
                tx.rollback().await;
                steps.reach(2);
            })
        },
    );
    assert_eq!(
        notes,
        vec!["young read Err(LockBusy)", "old commit Ok(())"],
        "plan {plan}"
    );
}

#[test]
fn waitdie_an_older_transaction_waits_and_a_younger_one_dies_2_nodes() {
    for plan in plans() {
        waitdie_older_waits(plan);
        waitdie_younger_dies(plan);
    }
}

fn mvcc_reader_behind_writer(plan: Plan) {
    let c = cluster_versions(plan, 4);
    let notes = two(
        &c,
        |mut co, steps, log| {
            Box::pin(async move {
                let ep = co.ep.clone();
                let mut tx = Txn::<Mvcc>::begin(&mut co);
                steps.reach(1);
                steps.wait(&ep, 2).await;
                // The writer committed after this reader's timestamp: read the version before.
                let r = tx.read(T, REMOTE_KEY).await.map(|v| v[0]);
                note(
                    &log,
                    format!("old reader {r:?} then {:?}", tx.commit().await.map(|_| ())),
                );
            })
        },
        |mut co, steps, log| {
            Box::pin(async move {
                let ep = co.ep.clone();
                steps.wait(&ep, 1).await;
                let mut tx = Txn::<Mvcc>::begin(&mut co);
                let v = tx.read_for_update(T, REMOTE_KEY).await.unwrap();
                tx.write(T, REMOTE_KEY, &[v[0] + 1]);
                note(&log, format!("writer {:?}", tx.commit().await.map(|_| ())));
                steps.reach(2);
            })
        },
    );
    assert_eq!(
        notes,
        vec!["writer Ok(())", "old reader Ok(100) then Ok(())"],
        "plan {plan}"
    );
    assert_eq!(c.payload(T, REMOTE_KEY)[0], 101);
}

fn mvcc_slot_overflow(plan: Plan) {
    // Two versions kept: after two newer writes, the old reader's version is gone.
    let c = cluster_versions(plan, 2);
    let notes = two(
        &c,
        |mut co, steps, log| {
            Box::pin(async move {
                let ep = co.ep.clone();
                let mut tx = Txn::<Mvcc>::begin(&mut co);
                steps.reach(1);
                steps.wait(&ep, 2).await;
                note(
                    &log,
                    format!("old reader {:?}", tx.read(T, REMOTE_KEY).await.map(|_| ())),
                );
                tx.rollback().await;
            })
        },
        |mut co, steps, log| {
            Box::pin(async move {
                let ep = co.ep.clone();
                steps.wait(&ep, 1).await;
                for _ in 0..2 {
                    let mut tx = Txn::<Mvcc>::begin(&mut co);
                    let v = tx.read_for_update(T, REMOTE_KEY).await.unwrap();
                    tx.write(T, REMOTE_KEY, &[v[0] + 1]);
                    note(&log, format!("writer {:?}", tx.commit().await.map(|_| ())));
                }
                steps.reach(2);
            })
        },
    );
    assert_eq!(
        notes,
        vec![
            "writer Ok(())",
            "writer Ok(())",
            "old reader Err(SlotOverflow)"
        ],
        "plan {plan}"
    );
}

#[test]
fn mvcc_a_reader_behind_a_writer_gets_the_older_version_and_slot_overflow_aborts_2_nodes() {
    for plan in mvcc_plans() {
        mvcc_reader_behind_writer(plan);
        mvcc_slot_overflow(plan);
    }
}

#[test]
fn mvcc_rejects_a_one_sided_commit_after_an_rpc_lock_with_the_reason() {
    let plan = Plan::parse("lock=rpc,commit=one-sided").unwrap();
    let e = Mvcc::check_plan(&plan).unwrap_err();
    assert!(e.0.contains("only a one-sided lock reads"), "{e}");
}

const OTHER_KEY: u64 = REMOTE_KEY + 1;

fn sundial_renews(plan: Plan) {
    let c = cluster(plan, false);
    let notes = two(
        &c,
        |mut co, _steps, log| {
            Box::pin(async move {
                // A write of OTHER_KEY leaves its lease at [1, 1].
                let mut tx = Txn::<Sundial>::begin(&mut co);
                let v = tx.read_for_update(T, OTHER_KEY).await.unwrap();
                tx.write(T, OTHER_KEY, &[v[0] + 1]);
                tx.commit().await.unwrap();
                // Reading REMOTE_KEY (lease [0, 0]) and writing OTHER_KEY needs commit_ts 2:
                // the read's lease is renewed to 2 instead of aborting.
                let mut tx = Txn::<Sundial>::begin(&mut co);
                tx.read(T, REMOTE_KEY).await.unwrap();
                let v = tx.read_for_update(T, OTHER_KEY).await.unwrap();
                tx.write(T, OTHER_KEY, &[v[0] + 1]);
                note(&log, format!("commit {:?}", tx.commit().await.map(|_| ())));
            })
        },
        |_co, _steps, _log| Box::pin(async {}),
    );
    assert_eq!(notes, vec!["commit Ok(())"], "plan {plan}");
    let h = c.header(T, REMOTE_KEY);
    assert_eq!(
        h[atoll_storage::layout::H_RTS as usize],
        2,
        "lease renewed to commit_ts (plan {plan})"
    );
    assert_eq!(h[atoll_storage::layout::H_WTS as usize], 0);
}

fn sundial_renewal_fails_after_a_write(plan: Plan) {
    let c = cluster(plan, false);
    let notes = two(
        &c,
        |mut co, steps, log| {
            Box::pin(async move {
                let ep = co.ep.clone();
                let mut tx = Txn::<Sundial>::begin(&mut co);
                tx.read(T, REMOTE_KEY).await.unwrap();
                steps.reach(1);
                steps.wait(&ep, 2).await;
                // Writing OTHER_KEY (lease [1, 1] by now) needs commit_ts 2 > REMOTE_KEY's
                // lease: renewing it fails, since a later write moved its wts.
                let v = tx.read_for_update(T, OTHER_KEY).await.unwrap();
                tx.write(T, OTHER_KEY, &[v[0] + 1]);
                note(
                    &log,
                    format!("reader commit {:?}", tx.commit().await.map(|_| ())),
                );
            })
        },
        |mut co, steps, log| {
            Box::pin(async move {
                let ep = co.ep.clone();
                steps.wait(&ep, 1).await;
                for key in [REMOTE_KEY, OTHER_KEY] {
                    let mut tx = Txn::<Sundial>::begin(&mut co);
                    let v = tx.read_for_update(T, key).await.unwrap();
                    tx.write(T, key, &[v[0] + 1]);
                    note(&log, format!("writer {:?}", tx.commit().await.map(|_| ())));
                }
                steps.reach(2);
            })
        },
    );
    assert_eq!(
        notes,
        vec![
            "writer Ok(())",
            "writer Ok(())",
            "reader commit Err(ValidationFailed)"
        ],
        "plan {plan}"
    );
}

#[test]
fn sundial_a_lease_is_renewed_instead_of_aborting_and_renewal_fails_after_a_write_2_nodes() {
    for plan in plans() {
        sundial_renews(plan);
        sundial_renewal_fails_after_a_write(plan);
    }
}

/// Fills node 1's table, then commits a transaction that inserts a key on node 0 (which
/// fits), one on node 1 (which does not) and updates a remote record.
fn insert_into_full_table<P: Protocol>(plan: Plan) {
    let c = cluster(plan, false);
    // Keys past the loaded ones live on node 1 (range partitioning clamps to the last node).
    let mut k = 2 * KEYS_PER_NODE;
    while c.stores[1].insert(T, k, &[1]).is_ok() {
        k += 1;
    }
    let key_on_full_node = k + 1;
    // A free key on node 0, whose table has room.
    let key_with_room = 5;
    c.stores[0].delete(T, key_with_room).unwrap();
    let notes = two(
        &c,
        move |mut co, _steps, log| {
            Box::pin(async move {
                let mut tx = Txn::<P>::begin(&mut co);
                let mut p = tx.read_for_update(T, REMOTE_KEY).await.unwrap().to_vec();
                p[0] += 1;
                tx.write(T, REMOTE_KEY, &p);
                tx.insert(T, key_with_room, &[7]);
                tx.insert(T, key_on_full_node, &[8]);
                let r = tx.commit().await.map(|_| ());
                note(&log, format!("insert {:?}", r));
                note(&log, format!("retryable {}", r.unwrap_err().is_retryable()));
                // The insert that fitted was undone, and no lock is left held.
                let mut tx = Txn::<P>::begin(&mut co);
                note(
                    &log,
                    format!(
                        "read undone {:?}",
                        tx.read(T, key_with_room).await.map(|_| ())
                    ),
                );
                tx.rollback().await;
                let mut tx = Txn::<P>::begin(&mut co);
                let mut p = tx.read_for_update(T, REMOTE_KEY).await.unwrap().to_vec();
                p[0] += 1;
                tx.write(T, REMOTE_KEY, &p);
                note(&log, format!("update {:?}", tx.commit().await.map(|_| ())));
            })
        },
        |_co, _steps, _log| Box::pin(async {}),
    );
    assert_eq!(
        notes,
        vec![
            "insert Err(TableFull)".to_string(),
            "retryable false".into(),
            "read undone Err(NotFound)".into(),
            "update Ok(())".into(),
        ],
        "{} plan {plan}",
        P::NAME
    );
    assert_eq!(c.stores[0].lookup(T, key_with_room), None);
    assert_eq!(c.payload(T, REMOTE_KEY)[0], 101);
    assert_eq!(
        c.header(T, REMOTE_KEY)[atoll_storage::layout::H_LOCK as usize],
        0
    );
}

#[test]
fn insert_into_a_full_table_aborts_with_table_full_under_every_protocol() {
    for plan in [
        Plan::uniform(Primitive::OneSided),
        Plan::uniform(Primitive::Rpc),
    ] {
        insert_into_full_table::<NoWait>(plan);
        insert_into_full_table::<WaitDie>(plan);
        insert_into_full_table::<Occ>(plan);
        insert_into_full_table::<Mvcc>(plan);
        insert_into_full_table::<Sundial>(plan);
    }
}

/// Slot reuse (issue 8): a coordinator caches a remote record's location; the record is
/// deleted and, the table being full, its slot goes to another key. Reading or locking the
/// old key through the stale location finds it gone (never the new key's payload), the new
/// key reads as itself, and nothing is left locked.
fn stale_location_after_reuse<P: Protocol>(plan: Plan) {
    let c = cluster(plan, false);
    let mut k = 2 * KEYS_PER_NODE;
    while c.stores[1].insert(T, k, &[1]).is_ok() {
        k += 1;
    }
    let new_key = k + 1;
    let s1 = c.stores[1].clone();
    let notes = two(
        &c,
        move |mut co, _steps, log| {
            let s1 = s1.clone();
            Box::pin(async move {
                let mut tx = Txn::<P>::begin(&mut co);
                let v = tx.read(T, REMOTE_KEY).await.map(|v| v[0]);
                note(
                    &log,
                    format!("read {v:?} {:?}", tx.commit().await.map(|_| ())),
                );
                let (old, _) = s1.delete(T, REMOTE_KEY).unwrap();
                let reused = s1.insert(T, new_key, &[777]).unwrap();
                note(&log, format!("reused {}", old == reused));
                let mut tx = Txn::<P>::begin(&mut co);
                note(
                    &log,
                    format!("stale read {:?}", tx.read(T, REMOTE_KEY).await),
                );
                tx.rollback().await;
                let mut tx = Txn::<P>::begin(&mut co);
                note(
                    &log,
                    format!("stale lock {:?}", tx.read_for_update(T, REMOTE_KEY).await),
                );
                tx.rollback().await;
                let mut tx = Txn::<P>::begin(&mut co);
                let v = tx.read_for_update(T, new_key).await.map(|v| v[0]);
                tx.write(T, new_key, &[778]);
                note(
                    &log,
                    format!("new {v:?} {:?}", tx.commit().await.map(|_| ())),
                );
            })
        },
        |_co, _steps, _log| Box::pin(async {}),
    );
    assert_eq!(
        notes,
        vec![
            "read Ok(100) Ok(())",
            "reused true",
            "stale read Err(NotFound)",
            "stale lock Err(NotFound)",
            "new Ok(777) Ok(())",
        ],
        "{} plan {plan}",
        P::NAME
    );
    assert_eq!(c.payload(T, new_key)[0], 778);
    assert_eq!(
        c.header(T, new_key)[atoll_storage::layout::H_LOCK as usize],
        0
    );
}

#[test]
fn a_stale_cached_location_of_a_reused_slot_is_rejected_under_every_protocol_and_plan() {
    for plan in plans() {
        stale_location_after_reuse::<NoWait>(plan);
        stale_location_after_reuse::<WaitDie>(plan);
        stale_location_after_reuse::<Occ>(plan);
        stale_location_after_reuse::<Mvcc>(plan);
        stale_location_after_reuse::<Sundial>(plan);
    }
}

/// Issue 7, defects 2 and 3: a blind write of a remote and a local record, then a read
/// followed by a write of the same record, each alone in the cluster: both commit and
/// leave exactly the values written (MVCC once lost the blind write while advancing the
/// version, and failed every read-then-write on its own raised `RTS`).
fn blind_write_then_read_then_write<P: Protocol>(plan: Plan) {
    // The versions its family keeps by default (Tell's slots hold at least two).
    let versions = atoll_testkit::RecordShape::of::<P>(1)
        .family
        .version_slots();
    let c = cluster_locking(plan, false, P::LOCK_WORD, versions);
    let before = c.header(T, REMOTE_KEY)[atoll_storage::layout::H_VERSION as usize];
    let notes = two(
        &c,
        |mut co, _steps, log| {
            Box::pin(async move {
                let mut tx = Txn::<P>::begin(&mut co);
                tx.write(T, REMOTE_KEY, &[555]);
                tx.write(T, 2, &[556]);
                note(&log, format!("blind {:?}", tx.commit().await.map(|_| ())));
                let mut tx = Txn::<P>::begin(&mut co);
                let v = tx.read(T, REMOTE_KEY).await.map(|v| v[0]);
                note(&log, format!("read {v:?}"));
                tx.write(T, REMOTE_KEY, &[v.unwrap_or(0) + 1]);
                note(&log, format!("upgrade {:?}", tx.commit().await.map(|_| ())));
            })
        },
        |_co, _steps, _log| Box::pin(async {}),
    );
    assert_eq!(
        notes,
        vec!["blind Ok(())", "read Ok(555)", "upgrade Ok(())"],
        "{} plan {plan}",
        P::NAME
    );
    assert_eq!(
        c.payload(T, REMOTE_KEY),
        vec![556],
        "{} plan {plan}",
        P::NAME
    );
    assert_eq!(c.payload(T, 2), vec![556], "{} plan {plan}", P::NAME);
    let after = c.header(T, REMOTE_KEY)[atoll_storage::layout::H_VERSION as usize];
    assert_eq!(
        after,
        before + 2,
        "{} plan {plan}: one version per write",
        P::NAME
    );
}

/// [`blind_write_then_read_then_write`] under the protocol a run selects.
struct Blind(Plan);

impl atoll_protocols::ProtocolVisitor for Blind {
    type Out = ();
    fn visit<P: Protocol>(self) {
        blind_write_then_read_then_write::<P>(self.0)
    }
}

#[test]
fn every_protocol_commits_a_blind_write_and_a_read_then_write_with_their_values_2_nodes() {
    for plan in plans() {
        // A sequenced protocol (CALVIN) runs only through its lanes, never a lone attempt.
        for p in atoll_protocols::ProtocolKind::ALL
            .into_iter()
            .filter(|p| !p.sequenced())
        {
            let plan = plan.only(p.stages());
            if p.check_plan(&plan).is_err() {
                continue;
            }
            p.dispatch(Blind(plan));
        }
    }
}
