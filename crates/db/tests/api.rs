//! The library's contract, as its users meet it: random transactions through the API under
//! every protocol (simulated with faults, and on real threads) with checked histories;
//! conflicts retried and counted; user errors returned with nothing installed; misuse and
//! bad schemas refused with typed errors; typed records and byte keys, collisions typed.

use atoll_check::{self as history, Mode};
use atoll_db::{
    run, Db, DbError, Job, NodeId, Options, Protocol, Rng, Schema, Table, TableId, TxError, TxnType,
};
use std::sync::{Arc, Mutex};

/// Keys of the table every random transaction works on: few, so transactions meet.
const KEYS: u64 = 48;
/// Words per record: the key, then a value every write raises.
const WORDS: u32 = 2;

/// The protocols the library runs: all but a sequenced one (CALVIN), which refuses it
/// (`api_a_sequenced_protocol_refuses_the_library_by_name`).
fn library_protocols() -> impl Iterator<Item = Protocol> {
    Protocol::ALL.into_iter().filter(|p| !p.sequenced())
}

#[test]
fn api_a_sequenced_protocol_refuses_the_library_by_name() {
    for protocol in Protocol::ALL.into_iter().filter(|p| p.sequenced()) {
        let (s, _, _) = schema();
        match Db::open(Options::default().protocol(protocol), s) {
            Err(DbError::Config(m)) => assert!(m.contains(protocol.name()), "{m}"),
            other => panic!("{}: {:?}", protocol.name(), other.map(|_| ())),
        }
    }
}

fn seeds() -> Vec<u64> {
    let base = match std::env::var("ATOLL_SEED") {
        Ok(s) => s.parse().expect("ATOLL_SEED is a whole number"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64 % 1_000_000)
            .unwrap_or(1),
    };
    (base..base + 4).collect()
}

fn schema() -> (Schema, TableId, TxnType) {
    let mut s = Schema::new();
    let kv = s.table(Table::new("kv", WORDS));
    let mixed = s.txn_type("mixed");
    s.load(move |l| {
        for k in 0..KEYS {
            l.put(kv, k, &[k, 0]);
        }
    });
    (s, kv, mixed)
}

/// What the random transactions ended with.
#[derive(Default, Debug)]
struct Tally {
    committed: u64,
    user: u64,
    other: Vec<String>,
}

/// One random transaction: reads some keys, raises some, and aborts itself when the first
/// record it read holds key plus value a multiple of 5 (a decision from data).
fn random_txn(
    rng: &mut Rng,
    kv: TableId,
) -> impl for<'t, 'u> Fn(&'t mut atoll_db::Tx<'u>) -> atoll_db::TxFuture<'t, u64, u64>
       + Send
       + Sync
       + 'static {
    let reads: Vec<u64> = (0..1 + rng.below(3)).map(|_| rng.below(KEYS)).collect();
    let writes: Vec<u64> = (0..rng.below(3)).map(|_| rng.below(KEYS)).collect();
    let blind = rng.chance(0.2);
    move |tx| {
        let (reads, writes) = (reads.clone(), writes.clone());
        Box::pin(async move {
            let mut first = None;
            for &k in &reads {
                let v = tx.get(kv, k).await?;
                assert_eq!(v[0], k, "record {k} holds another key's words");
                first.get_or_insert(v[0] + v[1]);
            }
            if let Some(v) = first.filter(|v| v % 5 == 0) {
                return Err(TxError::User(v));
            }
            for &k in &writes {
                let v = if blind {
                    0
                } else {
                    tx.get_for_update(kv, k).await?[1]
                };
                tx.put(kv, k, &[k, v + 1])?;
            }
            Ok(writes.len() as u64)
        })
    }
}

fn tally_into(t: &Arc<Mutex<Tally>>) -> impl FnOnce(Result<u64, TxError<u64>>) + Send + 'static {
    let t = t.clone();
    move |r| {
        let mut t = t.lock().unwrap();
        match r {
            Ok(_) => t.committed += 1,
            Err(TxError::User(_)) => t.user += 1,
            Err(e) => t.other.push(e.to_string()),
        }
    }
}

fn check_history(h: &[atoll_history::TxnRecord], protocol: Protocol, what: &str) {
    let v = history::check(h, Mode::from(protocol.isolation()));
    assert!(v.ok(), "{what}: {}", history::render(h, &v));
}

#[test]
fn api_random_transactions_under_every_protocol_in_the_simulator_with_faults_check_clean() {
    for seed in seeds() {
        for protocol in library_protocols() {
            let replay = format!(
                "ATOLL_SEED={seed} cargo test -p atoll-db --test api (protocol {})",
                protocol.name()
            );
            let mut o = Options::default()
                .protocol(protocol)
                .nodes(3)
                .threads(2)
                .coroutines(4)
                .simulated("edr-ib", "some", seed)
                .unwrap();
            o.run.duration_s = 0.01;
            o.run.record_history = true;
            let (s, kv, mixed) = schema();
            let tally = Arc::new(Mutex::new(Tally::default()));
            let t = tally.clone();
            let (report, stats) = run(o, s, move |rng: &mut Rng, _home: NodeId| {
                Some(Job::new(mixed, random_txn(rng, kv), tally_into(&t)))
            })
            .unwrap_or_else(|e| panic!("{e}\n  replay: {replay}"));
            assert!(report.passed, "{}\n  replay: {replay}", report.render());
            check_history(&report.history, protocol, &replay);
            let t = tally.lock().unwrap();
            assert!(
                t.committed > 0,
                "nothing committed: {t:?}\n  replay: {replay}"
            );
            assert!(t.user > 0, "no user abort: {t:?}\n  replay: {replay}");
            // The run's end cuts off transactions in flight: those end aborted, nothing else.
            assert!(
                t.other.iter().all(|e| e.contains("aborted")),
                "unexpected outcomes {:?}\n  replay: {replay}",
                t.other
            );
            assert_eq!(stats.committed, t.committed, "{replay}");
            assert_eq!(stats.user_aborted, t.user, "{replay}");
        }
    }
}

#[test]
fn api_random_transactions_from_threads_under_every_protocol_check_clean_from_the_history_file() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("histories");
    std::fs::create_dir_all(&dir).unwrap();
    for protocol in library_protocols() {
        let path = dir.join(format!("api-threads-{}.jsonl", protocol.name()));
        let (s, kv, mixed) = schema();
        let o = Options::default()
            .protocol(protocol)
            .coroutines(4)
            .attempts_max(10_000)
            .history(&path);
        let db = Arc::new(Db::open(o, s).unwrap());
        let tally = Arc::new(Mutex::new(Tally::default()));
        let clients: Vec<_> = (0..4u64)
            .map(|c| {
                let (db, tally) = (db.clone(), tally.clone());
                std::thread::spawn(move || {
                    let mut rng = Rng::new(c + 1);
                    for _ in 0..150 {
                        let r = db.transact_as(mixed, random_txn(&mut rng, kv));
                        tally_into(&tally)(r);
                    }
                })
            })
            .collect();
        for c in clients {
            c.join().unwrap();
        }
        let stats = db.stats();
        let report = Arc::into_inner(db).unwrap().close().unwrap();
        assert!(report.passed, "{}: {}", protocol.name(), report.render());
        let t = tally.lock().unwrap();
        assert_eq!(t.committed + t.user, 600, "{}: {t:?}", protocol.name());
        assert_eq!(stats.committed, t.committed);
        let h = atoll_history::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        check_history(&h, protocol, protocol.name());
    }
}

fn counter_db(protocol: Protocol) -> (Db, TableId) {
    let mut s = Schema::new();
    let c = s.table(Table::new("counter", 1));
    s.load(move |l| l.put(c, 0, &[0]));
    let o = Options::default()
        .protocol(protocol)
        .coroutines(8)
        .attempts_max(100_000);
    (Db::open(o, s).unwrap(), c)
}

#[test]
fn api_a_conflict_is_retried_and_counted_and_every_increment_lands_once() {
    for seed in seeds() {
        let replay = format!("ATOLL_SEED={seed} cargo test -p atoll-db --test api");
        let mut s = Schema::new();
        let c = s.table(Table::new("counter", 1));
        s.load(move |l| l.put(c, 0, &[0]));
        let mut o = Options::default()
            .protocol(Protocol::NoWait)
            .nodes(2)
            .threads(2)
            .coroutines(4)
            .attempts_max(100_000)
            .simulated("edr-ib", "none", seed)
            .unwrap();
        o.run.duration_s = 0.005;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s2 = seen.clone();
        let (report, stats) = run(o, s, move |_: &mut Rng, _: NodeId| {
            let seen = s2.clone();
            Some(Job::new(
                TxnType::default(),
                move |tx| {
                    Box::pin(async move {
                        let v = tx.get_for_update(c, 0).await?[0];
                        tx.put(c, 0, &[v + 1])?;
                        Ok(v + 1)
                    })
                },
                move |r: Result<u64, TxError<()>>| {
                    if let Ok(v) = r {
                        seen.lock().unwrap().push(v);
                    }
                },
            ))
        })
        .unwrap();
        assert!(report.passed, "{}\n  replay: {replay}", report.render());
        // Each committed increment wrote the value after the one before it: 1, 2, ... n.
        let mut seen = seen.lock().unwrap().clone();
        seen.sort_unstable();
        let n = seen.len() as u64;
        assert!(n > 0, "{replay}");
        assert_eq!(seen, (1..=n).collect::<Vec<_>>(), "{replay}");
        assert_eq!(stats.committed, n, "{replay}");
        assert!(
            stats.retried > 0,
            "eight co-routines on one record met no conflict: {stats:?}\n  replay: {replay}"
        );
        assert!(
            report.summary.aborts_by_reason["lock_busy"] >= stats.retried,
            "{replay}"
        );
    }
}

#[test]
fn api_a_user_error_is_returned_and_nothing_it_wrote_is_installed() {
    for protocol in library_protocols() {
        let (db, c) = counter_db(protocol);
        let r: Result<(), TxError<String>> = db.transact(move |tx| {
            Box::pin(async move {
                let v = tx.get_for_update(c, 0).await?[0];
                tx.put(c, 0, &[v + 100])?;
                // Its own write is what it reads back, before it changes its mind.
                assert_eq!(tx.get(c, 0).await?[0], v + 100);
                Err(TxError::User(format!("changed my mind at {v}")))
            })
        });
        match r {
            Err(TxError::User(m)) => assert_eq!(m, "changed my mind at 0"),
            other => panic!("{}: {other:?}", protocol.name()),
        }
        let v: u64 = db
            .transact(move |tx| {
                Box::pin(async move { Ok::<_, TxError<()>>(tx.get(c, 0).await?[0]) })
            })
            .unwrap();
        assert_eq!(
            v,
            0,
            "{}: a user error installed its write",
            protocol.name()
        );
        assert_eq!(db.stats().user_aborted, 1);
        let r = db.close().unwrap();
        let failed: Vec<_> = r.checks.iter().filter(|c| !c.passed).collect();
        assert!(r.passed, "{}: {failed:?}", protocol.name());
    }
}

#[test]
fn api_misuse_is_a_typed_error_and_installs_nothing() {
    let (db, c) = counter_db(Protocol::Occ);
    let wrong_size: Result<(), TxError<()>> =
        db.transact(move |tx| Box::pin(async move { Ok(tx.put(c, 0, &[1, 2])?) }));
    assert!(
        matches!(&wrong_size, Err(TxError::Misuse(m)) if m.contains("2 words, expected 1")),
        "{wrong_size:?}"
    );
    let no_table: Result<(), TxError<()>> = db.transact(|tx| {
        Box::pin(async move { tx.get(TableId(9), 0).await.map(|_| ()).map_err(Into::into) })
    });
    assert!(
        matches!(&no_table, Err(TxError::Misuse(m)) if m.contains("names no table")),
        "{no_table:?}"
    );
    let missing: Result<(), TxError<()>> = db.transact(move |tx| {
        Box::pin(async move { tx.get(c, 77).await.map(|_| ()).map_err(Into::into) })
    });
    assert!(
        matches!(
            missing,
            Err(TxError::Aborted {
                reason: atoll_db::Abort::NotFound,
                attempts: 1
            })
        ),
        "{missing:?}"
    );
    let too_many: Result<(), TxError<()>> = db.transact(move |tx| {
        Box::pin(async move {
            for k in 0..=u64::from(atoll_db::WRITE_SET_MAX_DEFAULT) {
                tx.insert(c, 1_000 + k, &[k])?;
            }
            Ok(())
        })
    });
    assert!(
        matches!(&too_many, Err(TxError::Misuse(m)) if m.contains("write_set_max")),
        "{too_many:?}"
    );
    let v: u64 = db
        .transact(move |tx| Box::pin(async move { Ok::<_, TxError<()>>(tx.get(c, 0).await?[0]) }))
        .unwrap();
    assert_eq!(v, 0);
    assert!(db.close().unwrap().passed);
}

#[test]
fn api_a_bad_schema_or_option_is_refused_before_the_database_opens() {
    let refused = |s: Schema, o: Options| match Db::open(o, s) {
        Err(DbError::Config(m)) => m,
        Err(e) => panic!("not a configuration error: {e}"),
        Ok(_) => panic!("opened"),
    };
    assert!(refused(Schema::new(), Options::default()).contains("no table"));
    let mut s = Schema::new();
    s.table(Table::new("wide", 0));
    assert!(refused(s, Options::default()).contains("record_words=0"));
    let mut s = Schema::new();
    let t = s.table(Table::new("t", 1));
    s.load(move |l| l.put(t, 1, &[1, 2, 3]));
    assert!(refused(s, Options::default()).contains("3 words, expected 1"));
    let (s, _, _) = schema();
    assert!(refused(s, Options::default().nodes(0)).contains("nodes"));
    let (s, _, _) = schema();
    let sim = Options::default().simulated("edr-ib", "none", 1).unwrap();
    assert!(refused(s, sim).contains("atoll_db::run"));
}

/// A weak hash that makes byte keys collide: their length and first byte only.
fn weak_hash(key: &[u8]) -> u64 {
    ((key.len() as u64) << 8) | key.first().copied().unwrap_or(0) as u64
}

#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Account {
    owner: String,
    cents: i64,
    tags: Vec<String>,
}

#[test]
fn api_typed_records_under_byte_keys_round_trip_and_a_hash_collision_is_a_typed_error() {
    for protocol in library_protocols() {
        let mut s = Schema::new();
        let acct = s.table(Table::typed("accounts", 96).byte_keys(32));
        let weak = s.table(Table::new("weak", 1).byte_keys_hashed_by(16, weak_hash));
        let start = Account {
            owner: "ada".into(),
            cents: 1_000,
            tags: vec!["gold".into()],
        };
        let loaded = start.clone();
        s.load(move |l| {
            l.put_as(acct, "acct-ada", &loaded);
            l.put_by(weak, "ab", &[7]);
        });
        let o = Options::default().protocol(protocol).coroutines(2);
        let db = Db::open(o, s).unwrap();
        let name = protocol.name();
        // Read, change and write a typed record by its byte key; insert another.
        let r: Result<i64, TxError<()>> = db.transact(move |tx| {
            Box::pin(async move {
                let mut a: Account = tx.get_for_update_as(acct, "acct-ada").await?;
                a.cents += 250;
                a.tags.push("moved".into());
                tx.put_as(acct, "acct-ada", &a).await?;
                let b = Account {
                    owner: "bob".into(),
                    cents: 5,
                    tags: vec![],
                };
                tx.insert_as(acct, "acct-bob", &b)?;
                // This attempt's own writes are what it reads back.
                let again: Account = tx.get_as(acct, "acct-ada").await?;
                Ok(again.cents)
            })
        });
        assert_eq!(r.unwrap(), 1_250, "{name}");
        let (ada, bob): (Account, Account) = db
            .transact(move |tx| {
                Box::pin(async move {
                    Ok::<_, TxError<()>>((
                        tx.get_as(acct, "acct-ada").await?,
                        tx.get_as(acct, "acct-bob").await?,
                    ))
                })
            })
            .unwrap();
        assert_eq!(
            (ada.cents, ada.tags.len(), bob.owner.as_str()),
            (1_250, 2, "bob"),
            "{name}"
        );
        // "ax" hashes as "ab" does: reading, writing or deleting it finds "ab"'s record.
        for op in 0..3 {
            let r: Result<(), TxError<()>> = db.transact(move |tx| {
                Box::pin(async move {
                    match op {
                        0 => drop(tx.get_by(weak, "ax").await?),
                        1 => tx.put_by(weak, "ax", &[9]).await?,
                        _ => tx.delete_by(weak, "ax").await?,
                    }
                    Ok(())
                })
            });
            match r {
                Err(TxError::KeyCollision(m)) => {
                    assert!(m.contains("\"ax\"") && m.contains("\"ab\""), "{name}: {m}")
                }
                other => panic!("{name}: op {op}: {other:?}"),
            }
        }
        // Inserting it finds the hash taken.
        let r: Result<(), TxError<()>> =
            db.transact(move |tx| Box::pin(async move { Ok(tx.insert_by(weak, "ax", &[9])?) }));
        assert!(
            matches!(
                r,
                Err(TxError::Aborted {
                    reason: atoll_db::Abort::Duplicate,
                    ..
                })
            ),
            "{name}: {r:?}"
        );
        // "ab" is untouched; misuse of keys and values is typed.
        let r: Result<u64, TxError<()>> = db.transact(move |tx| {
            Box::pin(async move {
                let v = tx.get_by(weak, "ab").await?[0];
                for bad in [
                    tx.get(weak, 3).await.map(drop),
                    tx.get_by(acct, 3u64).await.map(drop),
                    tx.get_as::<Account>(weak, "ab").await.map(drop),
                    tx.insert_by(acct, &[b'k'; 40], &[0; 13]),
                    tx.insert_as(acct, "big", &"x".repeat(200)),
                ] {
                    assert!(matches!(bad, Err(atoll_db::OpError::Misuse(_))), "{bad:?}");
                }
                Ok(v)
            })
        });
        assert_eq!(r.unwrap(), 7, "{name}");
        assert!(db.close().unwrap().passed, "{name}");
    }
}

#[test]
fn api_a_byte_keyed_table_cannot_be_ordered_and_its_keys_have_a_bound() {
    let refused = |t: Table| {
        let mut s = Schema::new();
        s.table(t);
        match Db::open(Options::default(), s) {
            Err(DbError::Config(m)) => m,
            other => panic!("{:?}", other.map(|_| ())),
        }
    };
    assert!(refused(Table::new("t", 1).ordered().byte_keys(8)).contains("cannot be ordered"));
    assert!(refused(Table::new("t", 1).byte_keys(0)).contains("expected 1..=1024"));
    assert!(refused(Table::typed("t", 40_000)).contains("out of range"));
}

#[test]
fn api_inserts_into_a_full_memory_budget_end_table_full_and_the_database_keeps_serving() {
    let mut s = Schema::new();
    let t = s.table(Table::new("log", 64));
    s.load(move |l| l.put(t, 0, &[0; 64]));
    let mut o = Options::default().coroutines(2);
    o.run.memory_max_bytes = Some(64 << 20);
    let db = Db::open(o, s).unwrap();
    let mut inserted = 0u64;
    let full = loop {
        let k = inserted + 1;
        let r: Result<(), TxError<()>> =
            db.transact(move |tx| Box::pin(async move { Ok(tx.insert(t, k, &[k; 64])?) }));
        match r {
            Ok(()) => inserted += 1,
            Err(e) => break e,
        }
        assert!(inserted < 1_000_000, "64 MiB never filled");
    };
    assert!(
        matches!(
            full,
            TxError::Aborted {
                reason: atoll_db::Abort::TableFull,
                ..
            }
        ),
        "{full:?}"
    );
    // What went in stays readable, and a later insert is refused the same way.
    let last: u64 = db
        .transact(move |tx| {
            Box::pin(async move { Ok::<_, TxError<()>>(tx.get(t, inserted).await?[0]) })
        })
        .unwrap();
    assert_eq!(last, inserted);
    let again: Result<(), TxError<()>> =
        db.transact(move |tx| Box::pin(async move { Ok(tx.insert(t, 0xffff_ffff, &[1; 64])?) }));
    assert!(
        matches!(
            again,
            Err(TxError::Aborted {
                reason: atoll_db::Abort::TableFull,
                ..
            })
        ),
        "{again:?}"
    );
    assert!(inserted > 1_000, "{inserted}");
    // The report says the budget was reached, and every other check holds.
    let report = db.close().unwrap();
    let failed: Vec<&str> = report
        .checks
        .iter()
        .filter(|c| !c.passed)
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(failed, ["run.memory_budget"], "{}", report.render());
}

#[test]
fn api_a_transaction_that_declares_its_keys_runs_within_them_and_is_refused_outside() {
    for protocol in library_protocols() {
        let (db, c) = counter_db(protocol);
        let name = protocol.name();
        let keys = || atoll_db::Declared::new().write(c, 0u64);
        let v: u64 = db
            .transact_declared(keys(), move |tx| {
                Box::pin(async move {
                    let v = tx.get_for_update(c, 0).await?[0];
                    tx.put(c, 0, &[v + 1])?;
                    Ok::<_, TxError<()>>(v + 1)
                })
            })
            .unwrap();
        assert_eq!(v, 1, "{name}");
        // Outside its keys: a read of another key, a write of one declared read-only, a scan.
        for op in 0..3 {
            let keys = match op {
                1 => atoll_db::Declared::new().read(c, 0u64),
                _ => keys(),
            };
            let r: Result<(), TxError<()>> = db.transact_declared(keys, move |tx| {
                Box::pin(async move {
                    match op {
                        0 => drop(tx.get(c, 1).await?),
                        1 => tx.put(c, 0, &[9])?,
                        _ => drop(tx.scan(c, 0, 9, 1).await?),
                    }
                    Ok(())
                })
            });
            match r {
                Err(TxError::Misuse(m)) => assert!(
                    m.contains("did not declare") || m.contains("cannot scan"),
                    "{name}: {m}"
                ),
                other => panic!("{name}: op {op}: {other:?}"),
            }
        }
        // Nothing a refused transaction wrote was installed.
        let v: u64 = db
            .transact(move |tx| {
                Box::pin(async move { Ok::<_, TxError<()>>(tx.get(c, 0).await?[0]) })
            })
            .unwrap();
        assert_eq!(v, 1, "{name}");
        assert!(db.close().unwrap().passed, "{name}");
    }
}

/// Set in the program this test starts (it plays a user's program): the protocol to run on
/// processes, and where the history goes.
const PROCESSES_PROGRAM_ENV: &str = "ATOLL_TEST_PROCESSES_PROGRAM";
const PROCESSES_TEST: &str =
    "api_random_transactions_on_processes_under_every_protocol_check_clean";

/// The user's program of [`api_random_transactions_on_processes_under_every_protocol_check_clean`]:
/// its node processes are this test binary too, started again with the same arguments.
fn processes_program(spec: &str) {
    let (protocol, path) = spec.split_once(' ').expect("PROTOCOL PATH");
    let protocol = Protocol::parse(protocol).expect("a protocol's name");
    let mut o = Options::default()
        .protocol(protocol)
        .coroutines(4)
        .attempts_max(10_000)
        .history(path)
        .processes("shm")
        .unwrap();
    // Short: its histories join the others adya cross-checks in CI.
    o.run.duration_s = 0.1;
    let (s, kv, mixed) = schema();
    let (report, stats) = run(o, s, move |rng: &mut Rng, _home: NodeId| {
        Some(Job::new(mixed, random_txn(rng, kv), |_| {}))
    })
    .unwrap_or_else(|e| panic!("{}: {e}", protocol.name()));
    assert!(report.passed, "{}: {}", protocol.name(), report.render());
    // The counts the node processes merged into the coordinator's report.
    assert!(stats.committed > 0, "{}: {stats:?}", protocol.name());
    assert!(stats.user_aborted > 0, "{}: {stats:?}", protocol.name());
    assert!(stats.attempts >= stats.committed + stats.user_aborted);
    // Its node processes served the first run: a second would run the first's transactions.
    let (s, _, _) = schema();
    match run(
        Options::default().processes("shm").unwrap(),
        s,
        |_: &mut Rng, _| None,
    ) {
        Err(DbError::Config(m)) => assert!(m.contains("one cluster"), "{m}"),
        other => panic!("a second cluster run: {:?}", other.map(|_| ())),
    }
    println!("program: {} {stats:?}", protocol.name());
}

#[test]
fn api_random_transactions_on_processes_under_every_protocol_check_clean() {
    if let Ok(spec) = std::env::var(PROCESSES_PROGRAM_ENV) {
        processes_program(&spec);
        return;
    }
    if atoll_cluster::ucx_available().is_err() {
        eprintln!("skipped: this build has no UCX (install libucx-dev)");
        return;
    }
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("histories");
    std::fs::create_dir_all(&dir).unwrap();
    let exe = std::env::current_exe().unwrap();
    for protocol in library_protocols() {
        let path = dir.join(format!("api-processes-{}.jsonl", protocol.name()));
        let _ = std::fs::remove_file(&path);
        let out = std::process::Command::new(&exe)
            .args([
                PROCESSES_TEST,
                "--exact",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(
                PROCESSES_PROGRAM_ENV,
                format!("{} {}", protocol.name(), path.display()),
            )
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("program: "),
            "{}: {}\n{stdout}\n{}",
            protocol.name(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        // The harness's "test NAME ... " may open the program's line.
        if let Some((_, line)) = stdout.lines().find_map(|l| l.split_once("program: ")) {
            eprintln!("{line}");
        }
        let h = atoll_history::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert!(!h.is_empty(), "{}: an empty history", protocol.name());
        check_history(&h, protocol, protocol.name());
    }
}

#[test]
fn api_a_db_never_opens_on_processes_and_an_unknown_transport_is_refused() {
    let o = Options::default().processes("shm").unwrap();
    let (s, _, _) = schema();
    match Db::open(o, s) {
        Err(DbError::Config(m)) => assert!(m.contains("atoll_db::run"), "{m}"),
        other => panic!("expected a config error, got {:?}", other.map(|_| ())),
    }
    let e = Options::default().processes("udp").unwrap_err();
    assert!(e.contains("udp"), "{e}");
}
