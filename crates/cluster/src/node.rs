//! The node's side (`atoll node`): the bootstrap over its connection, loading its
//! partition, serving the run, and handing the coordinator its summary and checks.

use atoll_fabric::{Coroutine, NodeId};
use atoll_fabric_ucx::{self as ucx, Bootstrap, NodeAddresses, RunWatch, Transports};
use atoll_protocols::ProtocolVisitor;
use atoll_runner::config::RunConfig;
use atoll_runner::node::NodeRuntime;
use atoll_runner::run::{node_coroutines, RunShared};
use atoll_runner::stats::Interval;
use atoll_txn::Protocol;
use atoll_workloads::{Workload, WorkloadShape, WorkloadVisitor};
use serde::Serialize;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::wire::*;

/// The node's side of the bootstrap, over its connection to the coordinator.
pub(crate) struct NodeLink {
    conn: Conn,
    rx: mpsc::Receiver<(u16, Result<Msg, ReadError>)>,
    deadline: Instant,
    pub(crate) run_deadline: Instant,
    /// Stops this node's heartbeat thread.
    beats: Arc<AtomicBool>,
}

impl Drop for NodeLink {
    fn drop(&mut self) {
        self.beats.store(true, Ordering::Release);
    }
}

impl NodeLink {
    /// Opens the link over a connected stream and starts its heartbeat.
    pub(crate) fn open(s: TcpStream) -> Result<NodeLink, ClusterError> {
        let (tx, rx) = mpsc::channel();
        let conn = Conn::open(s, 0, tx, false)
            .map_err(|e| ClusterError::Failed(format!("the coordinator's connection: {e}")))?;
        let beats = Arc::new(AtomicBool::new(false));
        heartbeat(vec![conn.clone()], beats.clone());
        let deadline = Instant::now() + Duration::from_secs(STARTUP_S_MAX);
        Ok(NodeLink {
            conn,
            rx,
            deadline,
            run_deadline: deadline,
            beats,
        })
    }

    pub(crate) fn send(&mut self, m: &Msg) -> Result<(), ClusterError> {
        self.conn
            .send(m)
            .map_err(|e| ClusterError::Failed(format!("the coordinator's connection: {e}")))
    }

    /// The coordinator is hung if it sent nothing for a heartbeat silence.
    pub(crate) fn coordinator_silent(&self, want: &str) -> Result<(), ClusterError> {
        match self.conn.silent_for() {
            Some(d) => Err(ClusterError::Failed(format!(
                "the coordinator sent nothing for {:.1} s, more than {HEARTBEAT_MISSED_MAX} heartbeats of {HEARTBEAT_INTERVAL_MS} ms: it hangs or is unreachable (waiting for '{want}')",
                d.as_secs_f64()
            ))),
            None => Ok(()),
        }
    }

    /// The next message, which must be `want`, by `until`.
    pub(crate) fn recv(&mut self, want: &str, until: Instant) -> Result<Msg, ClusterError> {
        loop {
            self.coordinator_silent(want)?;
            let left = until.saturating_duration_since(Instant::now());
            let step = left.min(Duration::from_millis(WATCH_INTERVAL_MS));
            return match self.rx.recv_timeout(step) {
                Ok((_, Ok(Msg::Failed { message, .. }))) => Err(ClusterError::Failed(format!(
                    "the coordinator stopped the run: {message}"
                ))),
                Ok((_, Ok(m))) if m.name() == want => Ok(m),
                Ok((_, Ok(m))) => Err(ClusterError::BadInput(format!(
                    "the coordinator sent '{}' where '{want}' was expected",
                    m.name()
                ))),
                Ok((_, Err(ReadError::Malformed(e)))) => Err(ClusterError::BadInput(format!(
                    "malformed message from the coordinator: {e}"
                ))),
                Ok((_, Err(ReadError::Closed))) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                    Err(ClusterError::Failed(format!(
                        "the coordinator's connection closed (waiting for '{want}')"
                    )))
                }
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() < until => continue,
                Err(mpsc::RecvTimeoutError::Timeout) => Err(ClusterError::Failed(format!(
                    "no '{want}' from the coordinator in time"
                ))),
            };
        }
    }
}

impl Bootstrap for NodeLink {
    fn exchange(&mut self, mine: NodeAddresses) -> Result<Vec<NodeAddresses>, String> {
        self.send(&Msg::Joined {
            workers: mine.workers,
            regions: mine.regions,
        })
        .map_err(|e| e.to_string())?;
        match self
            .recv("directory", self.deadline)
            .map_err(|e| e.to_string())?
        {
            Msg::Directory { nodes } => Ok(nodes
                .into_iter()
                .map(|(workers, regions)| NodeAddresses { workers, regions })
                .collect()),
            _ => unreachable!("recv checked the name"),
        }
    }

    fn start(&mut self) -> Result<(), String> {
        self.send(&Msg::Ready).map_err(|e| e.to_string())?;
        self.recv("start", self.deadline)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    fn wait_stop(&mut self, watch: &RunWatch<'_>) -> Result<(), String> {
        let mut sent_done = false;
        loop {
            if let Some(p) = watch.failure() {
                return Err(p.to_string());
            }
            if !sent_done && watch.finished() {
                sent_done = true;
                self.send(&Msg::Done).map_err(|e| e.to_string())?;
            }
            if Instant::now() > self.run_deadline {
                return Err("the run did not end in time".into());
            }
            self.coordinator_silent(if sent_done { "stop" } else { "the run's end" })
                .map_err(|e| e.to_string())?;
            match self.rx.recv_timeout(Duration::from_millis(5)) {
                Ok((_, Ok(Msg::Stop))) => return Ok(()),
                Ok((_, Ok(Msg::Failed { message, .. }))) => {
                    return Err(format!("the coordinator stopped the run: {message}"))
                }
                Ok((_, Ok(m))) => {
                    return Err(format!(
                        "the coordinator sent '{}' during the run",
                        m.name()
                    ))
                }
                Ok((_, Err(ReadError::Malformed(e)))) => {
                    return Err(format!("malformed message from the coordinator: {e}"))
                }
                Ok((_, Err(ReadError::Closed))) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err("the coordinator's connection closed".into())
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
    }
}

/// A mode a node process serves besides a `bench` run, chosen by the first argument of the
/// coordinator's Config; the crate root registers them, so this file knows none by name.
pub(crate) struct NodeMode {
    pub name: &'static str,
    pub serve: fn(&[String], NodeId, Transports, &mut NodeLink) -> Result<(), ClusterError>,
}

/// How a node runs its part of a run once configured: a `bench` run's workload chosen by its
/// flags ([`node_dispatch`]), or one the node's program built (the library's).
pub(crate) type NodeRun<'a> = &'a mut dyn FnMut(
    &RunConfig,
    NodeId,
    Transports,
    Vec<(String, String)>,
    &mut NodeLink,
) -> Result<(), ClusterError>;

/// `atoll node --coordinator ADDR --node N` (started by `atoll cluster --nodes`): connects
/// to the coordinator at `coordinator`, serves node `node` of the run it describes (whose
/// `bench` flags `resolve` turns into a configuration) with `run`, exits.
pub(crate) fn connect_and_serve(
    coordinator: &str,
    node: u16,
    modes: &[NodeMode],
    resolve: &dyn Fn(&[String]) -> Result<RunConfig, String>,
    run: NodeRun<'_>,
) -> Result<(), ClusterError> {
    let mut out = TcpStream::connect(coordinator).map_err(|e| {
        ClusterError::BadInput(format!(
            "cannot reach the coordinator at {coordinator}: {e}"
        ))
    })?;
    // Hello first, before the link's heartbeat can put a beat ahead of it.
    write_msg(
        &mut out,
        &Msg::Hello {
            version: PROTOCOL_VERSION,
            node,
        },
    )
    .map_err(|e| ClusterError::Failed(format!("the coordinator's connection: {e}")))?;
    let link = NodeLink::open(out)?;
    serve(link, node, None, Vec::new(), modes, resolve, run)
}

/// `atoll node --listen HOST:PORT`: listens there, says so on stdout (`listening on
/// ADDR`), waits up to [`LISTEN_WAIT_S_MAX`] for a coordinator to claim it (`atoll cluster
/// --hosts`), serves that one run and exits. While it serves, any other coordinator that
/// dials it is told it is busy (bad input on that side). Its UCX workers use the network
/// interface holding the listen address, so the worker addresses its peers get name it.
pub(crate) fn listen_and_serve(
    listen: &str,
    modes: &[NodeMode],
    resolve: &dyn Fn(&[String]) -> Result<RunConfig, String>,
) -> Result<(), ClusterError> {
    let addr = crate::hosts::parse_host("--listen", listen)?;
    let listener = TcpListener::bind(addr)
        .map_err(|e| ClusterError::BadInput(format!("cannot listen on {listen}: {e}")))?;
    let here = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| listen.into());
    println!("listening on {here} for a coordinator (atoll cluster --hosts), at most {LISTEN_WAIT_S_MAX} s");
    let _ = std::io::stdout().flush();
    listener
        .set_nonblocking(true)
        .map_err(|e| ClusterError::Failed(format!("listener: {e}")))?;
    let until = Instant::now() + Duration::from_secs(LISTEN_WAIT_S_MAX);
    let (mut s, peer, node, nodes) = loop {
        if Instant::now() > until {
            return Err(ClusterError::Failed(format!(
                "no coordinator claimed this node at {here} within {LISTEN_WAIT_S_MAX} s"
            )));
        }
        let (mut s, peer) = match listener.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(WATCH_INTERVAL_MS));
                continue;
            }
            Err(e) => return Err(ClusterError::Failed(format!("accept on {here}: {e}"))),
        };
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(Duration::from_secs(HANDSHAKE_S_MAX)));
        let _ = s.set_write_timeout(Some(Duration::from_secs(HANDSHAKE_S_MAX)));
        match read_msg(&mut s) {
            Ok(Msg::Claim {
                version,
                node,
                nodes,
            }) => {
                if version != PROTOCOL_VERSION {
                    let message = format!(
                        "the coordinator at {peer} speaks protocol version {version}, this node {PROTOCOL_VERSION}"
                    );
                    let _ = write_msg(
                        &mut s,
                        &Msg::Failed {
                            bad_input: true,
                            message: message.clone(),
                        },
                    );
                    return Err(ClusterError::BadInput(message));
                }
                break (s, peer, node, nodes);
            }
            // A probe or a coordinator that gave up before claiming: keep waiting.
            Err(ReadError::Closed) => continue,
            Ok(m) => {
                return Err(ClusterError::BadInput(format!(
                    "{peer} sent '{}' where a coordinator's 'claim' was expected",
                    m.name()
                )))
            }
            Err(ReadError::Malformed(e)) => {
                return Err(ClusterError::BadInput(format!(
                    "malformed message from {peer}, not a coordinator's claim: {e}"
                )))
            }
        }
    };
    refuse_others(listener, here.clone(), node, nodes, peer);
    write_msg(
        &mut s,
        &Msg::Hello {
            version: PROTOCOL_VERSION,
            node,
        },
    )
    .map_err(|e| ClusterError::Failed(format!("the coordinator's connection: {e}")))?;
    let link = NodeLink::open(s)?;
    let device = crate::hosts::interface_of(addr.ip());
    serve(
        link,
        node,
        Some(nodes),
        device.into_iter().collect(),
        modes,
        resolve,
        &mut node_dispatch,
    )
}

/// While this node serves a run, answers every other connection to its listener with
/// `failed {bad_input}`: it is busy. The thread ends with the process (the run is bounded).
pub(crate) fn refuse_others(
    listener: TcpListener,
    here: String,
    node: u16,
    nodes: u16,
    peer: SocketAddr,
) {
    if listener.set_nonblocking(false).is_err() {
        return;
    }
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { continue };
            let _ = s.set_write_timeout(Some(Duration::from_secs(HANDSHAKE_S_MAX)));
            let _ = write_msg(
                &mut s,
                &Msg::Failed {
                    bad_input: true,
                    message: format!(
                        "the node at {here} is already serving node {node} of {nodes} for another coordinator ({peer})"
                    ),
                },
            );
        }
    });
}

/// A node's run once it has a link and an id: Config, load, the UCX bootstrap, the run,
/// summary and checks. `nodes` is the count the coordinator claimed this node for (the
/// configuration must agree); `net_devices` the network interfaces UCX's tcp may use
/// (empty: UCX's default).
pub(crate) fn serve(
    mut link: NodeLink,
    node: u16,
    nodes: Option<u16>,
    net_devices: Vec<String>,
    modes: &[NodeMode],
    resolve: &dyn Fn(&[String]) -> Result<RunConfig, String>,
    run: NodeRun<'_>,
) -> Result<(), ClusterError> {
    let deadline = link.deadline;
    let (args, transport) = match link.recv("config", deadline)? {
        Msg::Config {
            version,
            args,
            transport,
        } => {
            if version != PROTOCOL_VERSION {
                return Err(ClusterError::BadInput(format!(
                    "the coordinator speaks protocol version {version}, this node {PROTOCOL_VERSION}"
                )));
            }
            (args, transport)
        }
        _ => unreachable!("recv checked the name"),
    };
    let refuse = |link: &mut NodeLink, e: String| {
        let _ = link.send(&Msg::Failed {
            bad_input: true,
            message: e.clone(),
        });
        ClusterError::BadInput(e)
    };
    let transports = match parse_transport(&transport) {
        Ok(t) => t,
        Err(e) => return Err(refuse(&mut link, e.0)),
    };
    // A mode other than a `bench` run (one side of `atoll fabric-bench`, say).
    if let Some(mode) = modes
        .iter()
        .find(|m| args.first().map(String::as_str) == Some(m.name))
    {
        let r = (mode.serve)(&args[1..], NodeId(node), transports, &mut link);
        return r.inspect_err(|e| link.fail(e));
    }
    let mut cfg = match resolve(&args) {
        Ok(c) => c,
        Err(e) => return Err(refuse(&mut link, e)),
    };
    if node >= cfg.nodes || nodes.is_some_and(|n| n != cfg.nodes) {
        return Err(refuse(
            &mut link,
            format!(
                "node {node} of {} claimed for a {}-node run",
                nodes.unwrap_or(cfg.nodes),
                cfg.nodes
            ),
        ));
    }
    // Each node streams its attempts to its own part of the history file as the run goes
    // (memory stays bounded); the coordinator joins the parts into the file at the end.
    cfg.history_file = cfg
        .history_file
        .take()
        .filter(|_| cfg.record_history)
        .map(|p| history_part(&p, node));
    link.run_deadline = Instant::now()
        + Duration::from_secs_f64(cfg.warmup_s + cfg.duration_s + RUN_MARGIN_S)
        + Duration::from_secs(STARTUP_S_MAX);
    let settings = if transports == Transports::Tcp && !net_devices.is_empty() {
        vec![("NET_DEVICES".to_string(), net_devices.join(","))]
    } else {
        Vec::new()
    };
    let r = run(&cfg, NodeId(node), transports, settings, &mut link);
    r.inspect_err(|e| link.fail(e))
}

impl NodeLink {
    /// Tells the coordinator this node gives up with `e` (a failure to tell it is moot: it
    /// sees the connection close).
    pub(crate) fn fail(&mut self, e: &ClusterError) {
        let _ = self.send(&Msg::Failed {
            bad_input: matches!(e, ClusterError::BadInput(_)),
            message: e.to_string(),
        });
    }
}

/// Which of the order-drawing processes node `node` is: under shared-data every compute
/// node draws orders for the memory nodes, so each takes its own stripe; partitioned, a
/// node draws for its own only.
pub(crate) fn order_stripe(cfg: &RunConfig, node: NodeId) -> (u16, u16) {
    let t = cfg.topology();
    match (t.architecture(), t.compute_index(node)) {
        (atoll_storage::Architecture::SharedData, Some(i)) => (i, t.compute_nodes()),
        _ => (0, 1),
    }
}

pub(crate) fn node_dispatch(
    cfg: &RunConfig,
    node: NodeId,
    transports: Transports,
    settings: Vec<(String, String)>,
    link: &mut NodeLink,
) -> Result<(), ClusterError> {
    struct V<'a> {
        cfg: &'a RunConfig,
        node: NodeId,
        transports: Transports,
        settings: Vec<(String, String)>,
        link: &'a mut NodeLink,
    }
    impl ProtocolVisitor for V<'_> {
        type Out = Result<(), ClusterError>;
        fn visit<P: Protocol>(self) -> Self::Out {
            let (cfg, node, t, link) = (self.cfg, self.node, self.transports, self.link);
            let settings = self.settings;
            atoll_txn::check_plan::<P>(&cfg.plan)
                .map_err(|e| ClusterError::BadInput(format!("plan {}: {e}", cfg.plan)))?;
            struct NodeWith<'a, P> {
                cfg: &'a RunConfig,
                node: NodeId,
                transports: Transports,
                settings: Vec<(String, String)>,
                link: &'a mut NodeLink,
                protocol: std::marker::PhantomData<fn() -> P>,
            }
            impl<P: Protocol> WorkloadVisitor for NodeWith<'_, P> {
                type Out = Result<(), ClusterError>;
                fn visit<W: Workload>(self, w: W) -> Self::Out {
                    let (cfg, node) = (self.cfg, self.node);
                    node_with::<W, P>(cfg, w, node, self.transports, self.settings, self.link)
                }
            }
            let shape = WorkloadShape {
                stripe: order_stripe(cfg, node),
                ..cfg.workload_shape()
            };
            let v = NodeWith::<P> {
                cfg,
                node,
                transports: t,
                settings,
                link,
                protocol: std::marker::PhantomData,
            };
            cfg.workload
                .dispatch(&cfg.params, &shape, v)
                .map_err(|e| ClusterError::BadInput(e.0))?
        }
    }
    cfg.protocol.dispatch(V {
        cfg,
        node,
        transports,
        settings,
        link,
    })
}

pub(crate) fn json<T: Serialize>(what: &str, v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or_else(|e| panic!("{what} does not serialize: {e}"))
}

/// This node process's share of the run's memory budget.
fn node_budget(
    cfg: &RunConfig,
    layout: &atoll_runner::run::Layout,
    node: NodeId,
) -> Result<Arc<atoll_storage::MemoryBudget>, ClusterError> {
    // This process's share of the run's budget: its share of the fixed structures, and for
    // a node holding records its share of the rest, for its tables.
    let sz = &layout.sizing;
    let fixed = sz.start_bytes_beside_tables() / cfg.nodes.max(1) as u64;
    let tables = if layout.catalog.topology().holds_records(node) {
        sz.memory_max_bytes
            .saturating_sub(sz.start_bytes_beside_tables())
            / sz.memory_nodes.max(1) as u64
    } else {
        0
    };
    let budget = Arc::new(atoll_storage::MemoryBudget::new(fixed + tables));
    budget
        .take(
            || "the node's log, family regions, location caches and co-routines".into(),
            node.0,
            0,
            fixed,
        )
        .map_err(|r| ClusterError::BadInput(format!("node {}: {r}", node.0)))?;
    Ok(budget)
}

/// Where node `node` streams its part of the history file `path`: beside it, on the node's
/// machine.
pub fn history_part(path: &std::path::Path, node: u16) -> std::path::PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".node{node}"));
    path.with_file_name(name)
}

/// The UCX settings of node `node` of the run `cfg`.
fn ucx_config(
    cfg: &RunConfig,
    node: NodeId,
    transports: Transports,
    settings: Vec<(String, String)>,
) -> ucx::UcxConfig {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    ucx::UcxConfig {
        transports,
        settings,
        nodes: cfg.nodes,
        threads_per_node: cfg.threads,
        pin_cpus: cfg.pin_cpus(node, cpus),
        op_timeout_ns: ucx::OP_TIMEOUT_MS_DEFAULT * 1_000_000,
        // Over tcp every one-sided op is a message too, and a doorbell carries tens of them
        // (a TPC-C NewOrder's reads): room for each coordinator's whole doorbell.
        am_inbox_messages_max: ucx::AM_INBOX_MESSAGES_DEFAULT
            .max(cfg.coordinators_total() as usize * AM_INBOX_MESSAGES_PER_COORDINATOR),
        coalesce: cfg.coalesce,
    }
}

pub(crate) fn node_with<W: Workload, P: Protocol>(
    cfg: &RunConfig,
    w: W,
    node: NodeId,
    transports: Transports,
    settings: Vec<(String, String)>,
    link: &mut NodeLink,
) -> Result<(), ClusterError> {
    cfg.validate()?;
    // The run's layout as the coordinator built it: regions allocated whole by UCX.
    let cfg = &RunConfig {
        regions_whole: true,
        ..cfg.clone()
    };
    let mut layout = atoll_runner::run::layout::<W, P>(cfg, &w)?;
    let catalog = layout.catalog.clone();
    let ucfg = ucx_config(cfg, node, transports, settings);
    // UCX allocates the node's words, so peers on this machine map them (real RMA over shm).
    let (arena, memory) = ucx::NodeArena::allocate(&ucfg, node, &catalog.region_words_of(node))
        .map_err(|e| ClusterError::BadInput(format!("node {}: {e}", node.0)))?;
    layout.budget = node_budget(cfg, &layout, node)?;
    let runtime = Arc::new(
        NodeRuntime::load_into(
            node,
            catalog.clone(),
            layout.budget.clone(),
            layout.txn_cfg.family.clone(),
            &w,
            Arc::new(memory),
        )?
        .with_replicas(&layout.txn_cfg, &w)?
        .with_own_log(cfg, false, layout.txn_cfg.log_ring_words)?,
    );
    let setup = runtime.setup();
    let history_out = match &cfg.history_file {
        Some(part) => Some(
            atoll_history::HistoryWriter::create(part, cfg.protocol.isolation())
                .map_err(|e| ClusterError::BadInput(format!("node {}: {e}", node.0)))?,
        ),
        None => None,
    };
    let shared = Arc::new(RunShared::new(w, &layout, cfg, history_out, None));
    // Each interval goes to the coordinator as it closes: it prints the cluster's progress.
    // One that cannot be sent is dropped; the connection's failure ends the run anyway.
    let (tx_iv, rx_iv) = mpsc::channel::<Interval>();
    let to_coordinator = link.conn.clone();
    let drain = std::thread::spawn(move || {
        for interval in rx_iv {
            let _ = to_coordinator.send(&Msg::Interval { interval });
        }
    });
    let spawn = |core: &Rc<atoll_fabric::WorkerCore>| -> Vec<Coroutine> {
        node_coroutines::<W, P>(core, &shared, &runtime, cfg.coroutines, &tx_iv)
    };
    let ran = ucx::run_node(&ucfg, arena, &setup, link, &spawn);
    drop(tx_iv);
    let _ = drain.join();
    let served = match &ran {
        Ok(reports) => reports.iter().map(|r| r.counters.rpcs_served).sum(),
        Err(_) => 0,
    };
    match ran {
        Ok(_) => {}
        Err(ucx::NodeRunError::Ucx(e)) => {
            return Err(ClusterError::BadInput(format!("node {}: {e}", node.0)))
        }
        // Its message names the node and what was wrong.
        Err(ucx::NodeRunError::Malformed(m)) => return Err(ClusterError::BadInput(m)),
        Err(e) => return Err(ClusterError::Failed(e.to_string())),
    }
    if let Some(out) = &shared.history_out {
        out.finish()
            .map_err(|e| ClusterError::Failed(format!("node {}: {e}", node.0)))?;
    }
    let mut summary = runtime.summary(&shared.w);
    summary.rpcs_served = Some(served);
    link.send(&Msg::Summary {
        summary: json("a node summary", &summary),
    })?;
    let finish = Instant::now() + Duration::from_secs(FINISH_S_MAX);
    let ledger: W::Ledger = match link.recv("ledger", finish)? {
        Msg::Ledger { ledger } => serde_json::from_value(ledger).map_err(|e| {
            ClusterError::BadInput(format!("malformed ledger from the coordinator: {e}"))
        })?,
        _ => unreachable!("recv checked the name"),
    };
    let checks = runtime.check(&shared.w, &ledger);
    link.send(&Msg::Checks {
        checks: json("a node's checks", &checks),
    })?;
    link.recv("bye", finish)?;
    Ok(())
}
