//! Hardware islands' deployments end to end in the simulator: nodes derived from machines of
//! sockets of cores at each granularity (an instance per core, per socket, per machine), the
//! placement the report states, and every deployment's run under faults checked clean with
//! its history serializable, over each channel within a machine, threads bound or not; the
//! instances' own logs, group-committed in the simulator and written to files in process.

use crate::tell_recovery::seeds_from;
use atoll_check::{self as history, Mode};
use atoll_fabric::machine::{Granularity, Machines, Placement, SocketLinks};
use atoll_protocols::ProtocolKind;
use atoll_runner::config::{Fabric, FaultConfig, InstanceLogConfig, IslandsConfig, NODES_MAX};
use atoll_runner::{run, RunConfig, RunError};
use atoll_testkit::{params, FAULTS_MIXED};
use atoll_workloads::{Params, WorkloadKind};

/// Two machines of two sockets of two cores: every granularity differs (8 instances of 1
/// thread, 4 of 2, 2 of 4), and instances talk both within a machine and across.
const SMALL: Machines = Machines {
    machines: 2,
    sockets_per_machine: 2,
    cores_per_socket: 2,
    links: SocketLinks::Full,
};

const GRANULARITIES: [Granularity; 3] =
    [Granularity::Core, Granularity::Socket, Granularity::Machine];

const CHANNELS: [&str; 3] = ["shm", "tcp-local", "unix"];

fn workload_params(w: WorkloadKind) -> Params {
    match w {
        WorkloadKind::Micro => params(&[
            ("rows_per_node", "64"),
            ("rows", "4"),
            ("kind", "update"),
            ("multisite_fraction", "0.5"),
        ]),
        WorkloadKind::Tpcc => params(&[
            ("customers_per_district", "30"),
            ("items", "100"),
            ("new_orders_max", "50"),
        ]),
        _ => Params::new(),
    }
}

/// Seed `seed`'s run of `granularity`: WAITDIE by request (Shore-MT's role) on odd seeds,
/// OCC one-sided (Silo's) on even ones, the channel and binding drawn from the seed.
fn islands_config(w: WorkloadKind, granularity: Granularity, seed: u64) -> RunConfig {
    let placement = Placement::derive(SMALL, granularity, NODES_MAX).unwrap();
    let (protocol, plan) = if seed % 2 == 1 {
        (ProtocolKind::WaitDie, "rpc")
    } else {
        (ProtocolKind::Occ, "one-sided")
    };
    let duration_s = if w == WorkloadKind::Tpcc { 0.02 } else { 0.004 };
    RunConfig {
        fabric: Fabric::Sim {
            net: "10gbe-tcp".into(),
            faults: FaultConfig::parse(FAULTS_MIXED).unwrap(),
        },
        workload: w,
        params: workload_params(w),
        protocol,
        plan: protocol.parse_plan(plan).unwrap(),
        nodes: placement.nodes(),
        threads: placement.threads_per_node,
        islands: Some(IslandsConfig {
            placement,
            channel: Some(CHANNELS[seed as usize % CHANNELS.len()].into()),
            constants: Vec::new(),
        }),
        pin_threads: seed % 3 != 0,
        // Every instance's own log on odd seeds (the paper's instances each keep one).
        instance_log: (seed % 2 == 1).then_some(InstanceLogConfig {
            dir: None,
            sync_us: 0.0,
        }),
        log_replicas: 1,
        coroutines: 2,
        duration_s,
        warmup_s: 0.0005,
        seed,
        record_history: true,
        ..RunConfig::default()
    }
}

#[test]
fn islands_every_granularity_runs_clean_under_faults_with_its_history_serializable() {
    let seeds = seeds_from("ATOLL_ISLANDS_SEEDS", 2);
    let mut wrong = Vec::new();
    let (mut runs, mut committed) = (0, 0);
    for w in [
        WorkloadKind::Micro,
        WorkloadKind::SmallBank,
        WorkloadKind::Tpcc,
    ] {
        for g in GRANULARITIES {
            for seed in 1..=seeds {
                let cfg = islands_config(w, g, seed);
                let what = format!(
                    "{} granularity {} seed {seed} ({} {}, channel {:?}, pinned {})",
                    w.name(),
                    g.name(),
                    cfg.protocol.name(),
                    cfg.plan,
                    cfg.islands.as_ref().unwrap().channel,
                    cfg.pin_threads
                );
                let r = match run(&cfg, &|_| {}) {
                    Ok(r) => r,
                    Err(e) => {
                        wrong.push(format!("{what}: {e}"));
                        continue;
                    }
                };
                runs += 1;
                committed += r.summary.committed;
                let mut bad: Vec<String> = r
                    .checks
                    .iter()
                    .filter(|c| !c.passed)
                    .map(|c| format!("{}: {}", c.name, c.detail))
                    .collect();
                let v = history::check(&r.history, Mode::Serializable);
                if !v.ok() {
                    bad.push(history::render(&r.history, &v));
                }
                if r.summary.committed == 0 {
                    bad.push("nothing committed".into());
                }
                let placement = r.config.placement.clone().unwrap_or_default();
                if !placement.contains(&format!("granularity {}", g.name())) {
                    bad.push(format!("the report's placement is {placement:?}"));
                }
                if !bad.is_empty() {
                    wrong.push(format!("{what}:\n{}", bad.join("\n")));
                }
            }
        }
    }
    eprintln!("islands: {runs} runs, {committed} committed");
    assert!(wrong.is_empty(), "{}", wrong.join("\n\n"));
}

#[test]
fn islands_a_machine_spread_over_sockets_pays_for_its_remote_memory() {
    // The same one-instance machine of 2 threads, its threads on one socket or on two: the
    // second pays a hop for half its pages and for lines the other thread wrote.
    let rate = |sockets: u16| {
        let machines = Machines {
            machines: 1,
            sockets_per_machine: sockets,
            cores_per_socket: 2 / sockets,
            links: SocketLinks::Full,
        };
        let placement = Placement::derive(machines, Granularity::Machine, NODES_MAX).unwrap();
        let cfg = RunConfig {
            fabric: Fabric::Sim {
                net: "10gbe-tcp".into(),
                faults: FaultConfig::default(),
            },
            workload: WorkloadKind::Micro,
            params: params(&[
                ("rows_per_node", "100000"),
                ("rows", "10"),
                ("kind", "read"),
            ]),
            protocol: ProtocolKind::Occ,
            nodes: 1,
            threads: 2,
            islands: Some(IslandsConfig {
                placement,
                channel: None,
                constants: Vec::new(),
            }),
            pin_threads: true,
            log_replicas: 0,
            coroutines: 2,
            duration_s: 0.01,
            warmup_s: 0.001,
            ..RunConfig::default()
        };
        let r = run(&cfg, &|_| {}).unwrap();
        assert!(r.checks.iter().all(|c| c.passed), "{}", r.render());
        r.summary.committed_per_s
    };
    let (one, two) = (rate(1), rate(2));
    assert!(
        two < one * 0.99,
        "2 sockets ran {two:.0} tx/s against one socket's {one:.0}"
    );
}

#[test]
fn islands_a_deployment_that_does_not_fit_is_refused_up_front() {
    let mut cfg = islands_config(WorkloadKind::SmallBank, Granularity::Socket, 1);
    cfg.threads = 3;
    match run(&cfg, &|_| {}) {
        Err(RunError::Config(e)) => assert!(e.0.contains("placement"), "{e}"),
        other => panic!(
            "expected a refusal, got {:?}",
            other.map(|r| r.summary.committed)
        ),
    }
    let mut cfg = islands_config(WorkloadKind::SmallBank, Granularity::Socket, 1);
    cfg.islands.as_mut().unwrap().channel = Some("carrier-pigeon".into());
    match run(&cfg, &|_| {}) {
        Err(RunError::Config(e)) => assert!(e.0.contains("shm, tcp-local, unix"), "{e}"),
        other => panic!(
            "expected a refusal, got {:?}",
            other.map(|r| r.summary.committed)
        ),
    }
}

/// A one-instance-per-`granularity` deployment of 1 machine of 4 cores running local update
/// transactions of the microbenchmark, one co-routine a thread, every instance keeping its
/// own log on `fabric`.
fn logged_run(fabric: Fabric, granularity: Granularity, sync_us: f64) -> atoll_runner::Report {
    let machines = Machines {
        machines: 1,
        sockets_per_machine: 1,
        cores_per_socket: 4,
        links: SocketLinks::Full,
    };
    let placement = Placement::derive(machines, granularity, NODES_MAX).unwrap();
    let sim = matches!(fabric, Fabric::Sim { .. });
    let cfg = RunConfig {
        fabric,
        workload: WorkloadKind::Micro,
        params: params(&[
            ("rows_per_node", "10000"),
            ("rows", "4"),
            ("kind", "update"),
            ("multisite_fraction", "0"),
        ]),
        protocol: ProtocolKind::WaitDie,
        nodes: placement.nodes(),
        threads: placement.threads_per_node,
        islands: Some(IslandsConfig {
            placement,
            channel: None,
            constants: Vec::new(),
        }),
        instance_log: Some(InstanceLogConfig { dir: None, sync_us }),
        // This machine's 2 cores cannot take the model's 4 bound threads.
        pin_threads: sim,
        log_replicas: 0,
        coroutines: 1,
        duration_s: if sim { 0.01 } else { 0.3 },
        warmup_s: if sim { 0.001 } else { 0.05 },
        ..RunConfig::default()
    };
    let r = run(&cfg, &|_| {}).unwrap();
    assert!(r.checks.iter().all(|c| c.passed), "{}", r.render());
    r
}

#[test]
fn islands_an_instance_log_groups_its_threads_records_into_shared_writes() {
    let sim = || Fabric::Sim {
        net: "10gbe-tcp".into(),
        faults: FaultConfig::default(),
    };
    // 20 µs a write on the device: threads that commit while a write is under way share the
    // next one. An instance of 4 threads groups; instances of 1 thread of 1 co-routine never
    // have a second record to group.
    let up = logged_run(sim(), Granularity::Machine, 20.0);
    let out = logged_run(sim(), Granularity::Core, 20.0);
    let (lu, lo) = (
        up.instance_log.clone().unwrap(),
        out.instance_log.clone().unwrap(),
    );
    assert!(lu.records_per_write > 1.5, "scale-up: {lu:?}");
    assert!(
        (lo.records_per_write - 1.0).abs() < 1e-9,
        "scale-out: {lo:?}"
    );
    for (r, l) in [(&up, &lu), (&out, &lo)] {
        assert!(
            l.records >= r.summary.committed,
            "{l:?} for {}",
            r.summary.committed
        );
        let check = r
            .checks
            .iter()
            .find(|c| c.name == "run.instance_log")
            .unwrap();
        assert!(check.detail.contains("records a write"), "{}", check.detail);
    }
    // The device's wait is the transaction's: without it the same run commits more.
    let fast = logged_run(sim(), Granularity::Core, 0.0);
    assert!(
        fast.summary.committed_per_s > 1.5 * out.summary.committed_per_s,
        "{} against {} tx/s",
        fast.summary.committed_per_s,
        out.summary.committed_per_s
    );
    // In process the instances write real files, each record once.
    for g in [Granularity::Machine, Granularity::Core] {
        let r = logged_run(Fabric::InProc, g, 0.0);
        let l = r.instance_log.unwrap();
        assert!(
            l.records >= r.summary.committed && l.writes >= 1 && l.writes <= l.records,
            "{} in process: {l:?}, {} committed",
            g.name(),
            r.summary.committed
        );
    }
}

#[test]
fn islands_an_instance_log_is_refused_where_nothing_logs_commit_records() {
    let mut cfg = islands_config(WorkloadKind::SmallBank, Granularity::Socket, 1);
    cfg.protocol = ProtocolKind::Calvin;
    match run(&cfg, &|_| {}) {
        Err(RunError::Config(e)) => assert!(e.0.contains("--instance-log"), "{e}"),
        other => panic!(
            "expected a refusal, got {:?}",
            other.map(|r| r.summary.committed)
        ),
    }
    let mut cfg = islands_config(WorkloadKind::SmallBank, Granularity::Socket, 1);
    cfg.instance_log.as_mut().unwrap().dir = Some("/tmp".into());
    match run(&cfg, &|_| {}) {
        Err(RunError::Config(e)) => assert!(e.0.contains("needs a real fabric"), "{e}"),
        other => panic!(
            "expected a refusal, got {:?}",
            other.map(|r| r.summary.committed)
        ),
    }
}
