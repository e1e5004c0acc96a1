//! A driven run ([`crate::run`]) on a cluster of OS processes over UCX, one node each: this
//! program is started again as every node, which builds the same workload and serves it.

use crate::source::{Generator, Library, Source};
use crate::{library, DbError, Options, Schema};
use atoll_cluster::{ClusterConfig, ClusterError, NodeProgram, Transports};
use atoll_runner::config::Fabric;
use atoll_runner::{Report, RunConfig};
use atoll_workloads::Workload;
use std::sync::atomic::{AtomicBool, Ordering};

/// A node process serves the first `run` it reaches, so a program can hold one cluster
/// run: a second one's nodes would serve the first's transactions. Process-wide because
/// the node processes are this whole program.
static CLUSTER_RUN_STARTED: AtomicBool = AtomicBool::new(false);

/// The flag the coordinator's arguments carry the nodes' budget in, as `atoll cluster`'s.
const MEMORY_MAX_FLAG: &str = "--memory-max";

/// What coordinator and nodes must agree on: the options and the tables (the loader and
/// the generator are code, and cannot be compared).
fn fingerprint(cfg: &RunConfig, w: &Library) -> String {
    format!("{cfg:?} {:?}", w.knobs())
}

/// Runs `w` on `options.run.nodes` processes of this program over `transport`.
pub(crate) fn coordinate(
    options: &Options,
    w: Library,
    transport: Transports,
) -> Result<Report, DbError> {
    if !matches!(options.run.fabric, Fabric::InProc) {
        return Err(DbError::Config(
            "a cluster of processes runs over UCX: leave the fabric as it is (in-process), not the simulator".into(),
        ));
    }
    if CLUSTER_RUN_STARTED.swap(true, Ordering::SeqCst) {
        return Err(DbError::Config(
            "a program runs one cluster of processes: its node processes serve the first atoll::run they reach, so a second would run the first's transactions".into(),
        ));
    }
    let exe = std::env::current_exe()
        .map_err(|e| DbError::Config(format!("cannot find this program to start nodes: {e}")))?;
    let cc = ClusterConfig {
        transport,
        bench_args: vec![fingerprint(&options.run, &w)],
        program: NodeProgram::Library {
            exe,
            args: std::env::args().skip(1).collect(),
        },
        hosts: None,
    };
    atoll_cluster::run_cluster_workload(&options.run, w, &cc, &|_| {}).map_err(|e| match e {
        ClusterError::BadInput(m) => DbError::Config(m),
        ClusterError::Failed(m) => DbError::Run(m),
    })
}

/// This process is node `NODE` of the coordinator at `ADDR` (the environment's `ADDR
/// NODE`): serves it with the workload this program built, and exits (0 served, 2 bad
/// input, 1 failed).
pub(crate) fn serve_node(
    env: &std::ffi::OsStr,
    options: Options,
    schema: Schema,
    generator: Box<Generator>,
) -> ! {
    let r = serve(env, options, schema, generator);
    let code = match &r {
        Ok(()) => 0,
        Err(ClusterError::BadInput(_)) => 2,
        Err(ClusterError::Failed(_)) => 1,
    };
    if let Err(e) = r {
        eprintln!("atoll library node ({}): {e}", env.to_string_lossy());
    }
    std::process::exit(code)
}

fn serve(
    env: &std::ffi::OsStr,
    options: Options,
    schema: Schema,
    generator: Box<Generator>,
) -> Result<(), ClusterError> {
    let bad = |m: String| ClusterError::BadInput(m);
    let env_text = env.to_string_lossy();
    let (addr, node) = env_text
        .split_once(' ')
        .and_then(|(a, n)| Some((a.to_string(), n.parse::<u16>().ok()?)))
        .ok_or_else(|| {
            bad(format!(
                "{}={env_text:?}: expected \"ADDR NODE\" (set by the coordinator)",
                atoll_cluster::LIBRARY_NODE_ENV
            ))
        })?;
    let w = library(&options.run, schema, Source::Generator(generator))
        .map_err(|e| bad(e.to_string()))?;
    let own = fingerprint(&options.run, &w);
    let run = options.run;
    let resolve = move |args: &[String]| -> Result<RunConfig, String> {
        let Some((theirs, rest)) = args.split_first() else {
            return Err("the coordinator sent no configuration".into());
        };
        if *theirs != own {
            return Err(format!(
                "this node's program reached atoll::run with other options or tables than the coordinator's: its code before run must build the same ones in every process\n  coordinator: {theirs}\n  this node:   {own}"
            ));
        }
        let mut cfg = run.clone();
        match rest {
            [] => {}
            [flag, bytes] if flag == MEMORY_MAX_FLAG => {
                let b = bytes
                    .parse::<u64>()
                    .map_err(|_| format!("{MEMORY_MAX_FLAG} {bytes:?}: expected bytes"))?;
                cfg.memory_max_bytes = Some(b);
            }
            other => {
                return Err(format!(
                    "unexpected arguments from the coordinator: {other:?}"
                ))
            }
        }
        Ok(cfg)
    };
    atoll_cluster::serve_library_node(&addr, node, &resolve, w)
}
