//! A bank on a cluster of OS processes, one node each, over UCX: every node's co-routines
//! draw transfers and audits from one generator, and each audit checks, inside its own
//! transaction, that every unit of money is still there.
//!
//! `cargo run --release --example cluster_bank [shm|tcp] [PROTOCOL] [SECONDS]` (default
//! shm, occ, 2 s). This program is started again as each node (atoll::run does it), so
//! everything before `run` builds the same options and tables in every process.

use atoll::{Job, NodeId, Options, Protocol, Rng, Schema, Table, TxError};

const ACCOUNTS: u64 = 1_000;
const OPENING_BALANCE: u64 = 100;
const NODES: u16 = 2;
/// One transaction in this many is an audit of every account.
const AUDIT_EVERY: u64 = 200;
/// A transfer moves at most this much.
const AMOUNT_MAX: u64 = 20;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let transport = args.first().map_or("shm", String::as_str);
    let protocol: Protocol = args.get(1).map_or(Ok(Protocol::Occ), |name| name.parse())?;
    let seconds: f64 = match args.get(2) {
        None => 2.0,
        Some(s) => s
            .parse()
            .ok()
            .filter(|s: &f64| (0.1..=600.0).contains(s))
            .ok_or_else(|| format!("seconds {s:?}: expected a number in 0.1..=600"))?,
    };
    let mut options = Options::default()
        .nodes(NODES)
        .protocol(protocol)
        .processes(transport)?;
    options.run.duration_s = seconds;

    let mut schema = Schema::new();
    let accounts = schema.table(Table::new("accounts", 1));
    let transfer = schema.txn_type("transfer");
    let audit = schema.txn_type("audit");
    schema.load(move |l| {
        for id in 0..ACCOUNTS {
            l.put(accounts, id, &[OPENING_BALANCE]);
        }
    });
    let generator = move |rng: &mut Rng, _home: NodeId| {
        if rng.below(AUDIT_EVERY) == 0 {
            // A wrong total is the audit's own error: counted as a user abort below.
            return Some(Job::new(
                audit,
                move |tx| {
                    Box::pin(async move {
                        let mut total = 0;
                        for id in 0..ACCOUNTS {
                            total += tx.get(accounts, id).await?[0];
                        }
                        if total != ACCOUNTS * OPENING_BALANCE {
                            return Err(TxError::User(total));
                        }
                        Ok(())
                    })
                },
                |_: Result<(), TxError<u64>>| {},
            ));
        }
        let from = rng.below(ACCOUNTS);
        let to = (from + 1 + rng.below(ACCOUNTS - 1)) % ACCOUNTS;
        let amount = 1 + rng.below(AMOUNT_MAX);
        Some(Job::new(
            transfer,
            move |tx| {
                Box::pin(async move {
                    let a = tx.get_for_update(accounts, from).await?[0];
                    let b = tx.get_for_update(accounts, to).await?[0];
                    // An overdraft moves nothing (and commits): only audits return errors.
                    if a >= amount {
                        tx.put(accounts, from, &[a - amount])?;
                        tx.put(accounts, to, &[b + amount])?;
                    }
                    Ok::<_, TxError<u64>>(())
                })
            },
            |_| {},
        ))
    };
    println!(
        "cluster_bank: {ACCOUNTS} accounts of {OPENING_BALANCE} on {NODES} processes over {transport}, {} ({:?} isolation), {seconds} s",
        protocol.name(),
        options.isolation()
    );
    let (report, stats) = atoll::run(options, schema, generator)?;
    println!(
        "{} transactions committed, {} attempts, {} retried after a conflict, {} gave up; {:.0} tx/s",
        stats.committed,
        stats.attempts,
        stats.retried,
        stats.gave_up,
        report.summary.committed_per_s
    );
    if stats.user_aborted > 0 {
        return Err(format!("{} audits found money missing", stats.user_aborted).into());
    }
    if stats.committed == 0 {
        return Err("no transaction committed".into());
    }
    if !report.passed {
        return Err(format!("a check failed:\n{}", report.render()).into());
    }
    println!("every audit found all {} units", ACCOUNTS * OPENING_BALANCE);
    Ok(())
}
