//! A cluster of OS processes, one node each, over the UCX fabric: the coordinator
//! (`atoll cluster`) and the node (`atoll node`), and the bootstrap between them.
//!
//! Two ways to meet. Started here (`--nodes N`): the coordinator listens on a loopback TCP
//! port and starts one `atoll node --coordinator ADDR --node i` child per node, which dials
//! it and says Hello. Across machines (`--hosts h:p,...`): each node was started by hand
//! (`atoll node --listen h:p`) and waits; the coordinator dials node `i` at the `i`-th entry
//! and Claims it (version, node id, node count), the node answers Hello. Either way each
//! node then has its own connection carrying length-prefixed JSON messages ([`Msg`],
//! versioned). The bootstrap: Config (the `bench` flags, the transport) -> each node loads
//! its partition, registers its memory and answers Joined (worker addresses, region
//! descriptors) -> Directory (every node's) -> each connects and answers Ready -> Start (the
//! barrier: clocks start) -> each node's co-routines finish: Done -> Stop (every node done,
//! so no more requests will come) -> Summary -> Ledger (the merged one) -> Checks -> Bye.
//! The coordinator merges and reports exactly as the in-process driver does
//! ((`atoll_runner::driver`)).
//!
//! Failures: a node's connection that closes or a child that exits before Bye ends the run
//! (every child killed and reaped) with an error naming the node; so does a node that sends
//! nothing (not even its heartbeat, a Beat every [`HEARTBEAT_INTERVAL_MS`]) for
//! [`HEARTBEAT_SILENCE_MS_MAX`]: stopped or wedged. A node hears the coordinator's beats
//! the same way. Every wait is bounded.
//!
//! A node has a second mode, one side of `atoll fabric-bench` ([`crate::fabric_bench`]),
//! chosen by a Config whose first arg is [`crate::fabric_bench::MODE`]; same bootstrap. The
//! modes are registered here ([`NODE_MODES`]).

pub mod fabric_bench;
pub mod hosts;
mod launch;
mod node;
mod wire;

pub use atoll_fabric_ucx::Transports;
pub use launch::*;
pub use wire::*;

use atoll_runner::RunConfig;

/// The modes a node process serves besides a `bench` run.
const NODE_MODES: &[node::NodeMode] = &[node::NodeMode {
    name: fabric_bench::MODE,
    serve: fabric_bench::serve_node,
}];

/// `atoll node --coordinator ADDR --node N` (started by `atoll cluster --nodes`): connects
/// to the coordinator at `coordinator`, serves node `node` of the run it describes (whose
/// `bench` flags `resolve` turns into a configuration), exits.
pub fn serve_node(
    coordinator: &str,
    node: u16,
    resolve: &dyn Fn(&[String]) -> Result<RunConfig, String>,
) -> Result<(), ClusterError> {
    node::connect_and_serve(
        coordinator,
        node,
        NODE_MODES,
        resolve,
        &mut node::node_dispatch,
    )
}

/// A node process of a program built on the library ([`NodeProgram::Library`]): connects
/// to the coordinator at `coordinator` and serves node `node` with the workload `w` the
/// program built, under the configuration `resolve` makes of the coordinator's arguments.
pub fn serve_library_node<W: atoll_workloads::Workload>(
    coordinator: &str,
    node: u16,
    resolve: &dyn Fn(&[String]) -> Result<RunConfig, String>,
    w: W,
) -> Result<(), ClusterError> {
    use atoll_protocols::ProtocolVisitor;
    let mut w = Some(w);
    let mut run = |cfg: &RunConfig,
                   node: atoll_fabric::NodeId,
                   t: atoll_fabric_ucx::Transports,
                   settings: Vec<(String, String)>,
                   link: &mut node::NodeLink| {
        struct V<'a, W> {
            cfg: &'a RunConfig,
            w: W,
            node: atoll_fabric::NodeId,
            t: atoll_fabric_ucx::Transports,
            settings: Vec<(String, String)>,
            link: &'a mut node::NodeLink,
        }
        impl<W: atoll_workloads::Workload> ProtocolVisitor for V<'_, W> {
            type Out = Result<(), ClusterError>;
            fn visit<P: atoll_txn::Protocol>(self) -> Self::Out {
                atoll_txn::check_plan::<P>(&self.cfg.plan)
                    .map_err(|e| ClusterError::BadInput(format!("plan {}: {e}", self.cfg.plan)))?;
                node::node_with::<W, P>(
                    self.cfg,
                    self.w,
                    self.node,
                    self.t,
                    self.settings,
                    self.link,
                )
            }
        }
        let w = w.take().ok_or_else(|| {
            ClusterError::Failed("a library node serves one run and was asked for two".into())
        })?;
        cfg.protocol.dispatch(V {
            cfg,
            w,
            node,
            t,
            settings,
            link,
        })
    };
    node::connect_and_serve(coordinator, node, NODE_MODES, resolve, &mut run)
}

/// `atoll node --listen HOST:PORT`: listens there, says so on stdout (`listening on
/// ADDR`), waits up to [`LISTEN_WAIT_S_MAX`] for a coordinator to claim it (`atoll cluster
/// --hosts`), serves that one run and exits (see [`node`]'s listening side).
pub fn serve_listening(
    listen: &str,
    resolve: &dyn Fn(&[String]) -> Result<RunConfig, String>,
) -> Result<(), ClusterError> {
    node::listen_and_serve(listen, NODE_MODES, resolve)
}
