//! What running transactions through the library costs: SmallBank as the built-in workload
//! and the same six transactions written against `atoll::Tx`, same cluster, same generator,
//! run alternately in one process. Prints each run's throughput and the median ratio.
//!
//! `cargo run --release --example smallbank_api [SECONDS] [ROUNDS]` (default 3 s, 3 rounds).

use atoll::{Job, NodeId, Options, Rng, Schema, Table, TableId, TxError};
use atoll_workloads::smallbank::{Input, SmallBank};
use atoll_workloads::{Params, Workload, WorkloadShape};

// SmallBank's amounts in cents, as the built-in workload (crates/workloads/src/smallbank.rs).
const INITIAL_BALANCE: i64 = 10_000;
const DEPOSIT_CHECKING: i64 = 130;
const SEND_PAYMENT: i64 = 500;
const TRANSACT_SAVINGS: i64 = 2020;
const WRITE_CHECK: i64 = 500;
const OVERDRAFT_PENALTY: i64 = 100;

fn bal(w: &[u64]) -> i64 {
    w[0] as i64
}

/// SmallBank's transaction `input` through the library.
fn job(input: Input, ty: atoll::TxnType, sav: TableId, chk: TableId) -> Job {
    Job::new(
        ty,
        move |tx| {
            Box::pin(async move {
                match input {
                    Input::Amalgamate { a, b } => {
                        tx.fetch(&[(sav, a, true), (chk, a, true), (chk, b, true)])
                            .await?;
                        let sa = bal(&tx.get_for_update(sav, a).await?);
                        let ca = bal(&tx.get_for_update(chk, a).await?);
                        let cb = bal(&tx.get_for_update(chk, b).await?);
                        tx.put(sav, a, &[0])?;
                        tx.put(chk, a, &[0])?;
                        tx.put(chk, b, &[(cb + sa + ca) as u64])?;
                    }
                    Input::Balance { a } => {
                        tx.fetch(&[(sav, a, false), (chk, a, false)]).await?;
                        let _total = bal(&tx.get(sav, a).await?) + bal(&tx.get(chk, a).await?);
                    }
                    Input::DepositChecking { a } => {
                        let c = bal(&tx.get_for_update(chk, a).await?);
                        tx.put(chk, a, &[(c + DEPOSIT_CHECKING) as u64])?;
                    }
                    Input::SendPayment { a, b } => {
                        tx.fetch(&[(chk, a, true), (chk, b, true)]).await?;
                        let ca = bal(&tx.get_for_update(chk, a).await?);
                        let cb = bal(&tx.get_for_update(chk, b).await?);
                        if ca < SEND_PAYMENT {
                            return Err(TxError::User(()));
                        }
                        tx.put(chk, a, &[(ca - SEND_PAYMENT) as u64])?;
                        tx.put(chk, b, &[(cb + SEND_PAYMENT) as u64])?;
                    }
                    Input::TransactSavings { a } => {
                        let s = bal(&tx.get_for_update(sav, a).await?);
                        if s + TRANSACT_SAVINGS < 0 {
                            return Err(TxError::User(()));
                        }
                        tx.put(sav, a, &[(s + TRANSACT_SAVINGS) as u64])?;
                    }
                    Input::WriteCheck { a } => {
                        tx.fetch(&[(sav, a, false), (chk, a, true)]).await?;
                        let s = bal(&tx.get(sav, a).await?);
                        let c = bal(&tx.get_for_update(chk, a).await?);
                        let debit = if s + c < WRITE_CHECK {
                            WRITE_CHECK + OVERDRAFT_PENALTY
                        } else {
                            WRITE_CHECK
                        };
                        tx.put(chk, a, &[(c - debit) as u64])?;
                    }
                }
                Ok(())
            })
        },
        |_: Result<(), TxError<()>>| {},
    )
}

fn through_api(options: &Options, bank: &SmallBank) -> Result<f64, Box<dyn std::error::Error>> {
    let mut schema = Schema::new();
    let per_node = bank.accounts;
    let sav = schema.table(Table::new("savings", 1).grouped_by(move |k| k / per_node));
    let chk = schema.table(Table::new("checking", 1).grouped_by(move |k| k / per_node));
    let types: Vec<atoll::TxnType> = bank
        .txn_types()
        .iter()
        .map(|n| schema.txn_type(n))
        .collect();
    let nodes = options.run.nodes as u64;
    schema.load(move |l| {
        for k in 0..per_node * nodes {
            l.put(sav, k, &[INITIAL_BALANCE as u64]);
            l.put(chk, k, &[INITIAL_BALANCE as u64]);
        }
    });
    let bank = bank.clone();
    let nodes = options.run.nodes;
    let (report, _) = atoll::run(
        options.clone(),
        schema,
        move |rng: &mut Rng, home: NodeId| {
            let (ty, input) = bank.generate(rng, nodes, home);
            Some(job(input, types[ty], sav, chk))
        },
    )?;
    if !report.passed {
        return Err(format!("the API run failed a check:\n{}", report.render()).into());
    }
    Ok(report.summary.committed_per_s)
}

fn built_in(options: &Options) -> Result<f64, Box<dyn std::error::Error>> {
    let report = atoll_runner::run(&options.run, &|_| {})?;
    if !report.passed {
        return Err(format!("the built-in run failed a check:\n{}", report.render()).into());
    }
    Ok(report.summary.committed_per_s)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seconds: f64 = args.first().map_or(Ok(3.0), |s| s.parse())?;
    let rounds: usize = args.get(1).map_or(Ok(3), |s| s.parse())?;
    if !(0.1..=600.0).contains(&seconds) || !(1..=50).contains(&rounds) {
        return Err("expected SECONDS in 0.1..=600 and ROUNDS in 1..=50".into());
    }
    let mut options = Options::default();
    options.run.duration_s = seconds;
    options.run.warmup_s = 0.5;
    let shape = WorkloadShape::new(options.run.nodes, options.run.threads);
    let bank = SmallBank::configure(&Params::new(), &shape)?;
    let (mut ratios, mut api, mut builtin) = (Vec::new(), Vec::new(), Vec::new());
    for round in 1..=rounds {
        let b = built_in(&options)?;
        let a = through_api(&options, &bank)?;
        println!(
            "round {round}: built-in {b:.0} tx/s, through the API {a:.0} tx/s, ratio {:.3}",
            a / b
        );
        ratios.push(a / b);
        api.push(a);
        builtin.push(b);
    }
    println!(
        "median: built-in {:.0} tx/s, API {:.0} tx/s, API / built-in {:.3}",
        median(builtin),
        median(api),
        median(ratios)
    );
    Ok(())
}
