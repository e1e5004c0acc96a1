//! The coordinator's side (`atoll cluster`): starts or dials the nodes, drives the
//! bootstrap, merges their summaries and reports as the in-process driver does.

use crate::hosts::Host;
use atoll_fabric_ucx::{self as ucx, Transports};
use atoll_protocols::ProtocolVisitor;
use atoll_runner::config::RunConfig;
use atoll_runner::driver::{RunFacts, StoppedNodes};
use atoll_runner::node::{NodeChecks, NodeSummary};
use atoll_runner::pulse::Pulse;
use atoll_runner::report::{Progress, ProgressFn, Report};
use atoll_runner::run::collect_progress;
use atoll_txn::Protocol;
use atoll_workloads::{Workload, WorkloadVisitor};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::node::*;
use crate::wire::*;

/// How `atoll cluster` runs: the processes and what they run.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    pub transport: Transports,
    /// The `bench` flags, as given (every node resolves them as the coordinator did).
    pub bench_args: Vec<String>,
    /// The program the nodes run, when they are started here.
    pub program: NodeProgram,
    /// `--hosts`: the nodes wait there (`atoll node --listen`), node `i` the `i`-th; `None`
    /// starts `cfg.nodes` children here.
    pub hosts: Option<Vec<Host>>,
}

/// The environment variable that makes a program built on the library a node process:
/// `ADDR NODE`, the coordinator to dial and the node to serve ([`NodeProgram::Library`]).
pub const LIBRARY_NODE_ENV: &str = "ATOLL_LIBRARY_NODE";

/// What a node process started here runs.
#[derive(Clone, Debug)]
pub enum NodeProgram {
    /// The `atoll` binary at this path: `EXE node --coordinator ADDR --node N`.
    Atoll(std::path::PathBuf),
    /// A program built on the library, run with its own arguments `args`; it learns it is a
    /// node from [`LIBRARY_NODE_ENV`], and serves with its own workload
    /// ([`serve_library_node`]).
    Library {
        exe: std::path::PathBuf,
        args: Vec<String>,
    },
}

impl NodeProgram {
    fn command(&self, coordinator: &str, node: u16) -> Command {
        match self {
            NodeProgram::Atoll(exe) => {
                let mut c = Command::new(exe);
                c.args([
                    "node",
                    "--coordinator",
                    coordinator,
                    "--node",
                    &node.to_string(),
                ]);
                c
            }
            NodeProgram::Library { exe, args } => {
                let mut c = Command::new(exe);
                c.args(args)
                    .env(LIBRARY_NODE_ENV, format!("{coordinator} {node}"));
                c
            }
        }
    }

    fn exe(&self) -> &std::path::Path {
        match self {
            NodeProgram::Atoll(exe) | NodeProgram::Library { exe, .. } => exe,
        }
    }
}

/// The node processes; killed and reaped when dropped unless they ended.
pub(crate) struct Children {
    procs: Vec<Child>,
}

impl Children {
    /// The first child that exited, with how.
    pub(crate) fn exited(&mut self) -> Option<(u16, String)> {
        self.procs.iter_mut().enumerate().find_map(|(i, c)| {
            c.try_wait()
                .ok()
                .flatten()
                .map(|st| (i as u16, describe_exit(st)))
        })
    }

    /// Waits up to `within` for every child to exit by itself; kills what is left.
    pub(crate) fn reap(&mut self, within: Duration) {
        let until = Instant::now() + within;
        for c in &mut self.procs {
            while Instant::now() < until {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        self.kill_all();
    }

    /// SIGKILL (which also ends a stopped process) and reap every child still there.
    pub(crate) fn kill_all(&mut self) {
        for c in &mut self.procs {
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
            }
            let _ = c.wait();
        }
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        self.kill_all();
    }
}

pub(crate) fn describe_exit(st: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (st.code(), st.signal()) {
        (Some(c), _) => format!("exited with code {c}"),
        (None, Some(s)) => format!("was killed by signal {s}"),
        _ => "exited".into(),
    }
}

/// The coordinator's connections and the children behind them.
pub(crate) struct Hub {
    conns: Vec<Conn>,
    rx: mpsc::Receiver<(u16, Result<Msg, ReadError>)>,
    children: Children,
    /// Each node as messages name it: `node 1 (pid 4242)`, `node 1 (10.0.0.2:7000)`.
    labels: Vec<String>,
    /// Stops the coordinator's heartbeat thread.
    beats: Arc<AtomicBool>,
    /// Where the nodes' progress intervals go while a run's are collected.
    intervals: Option<mpsc::Sender<atoll_runner::stats::Interval>>,
    /// The highest interval index a run can close (a larger one is malformed, and would
    /// grow the collector's pending intervals without bound).
    interval_index_max: u64,
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.beats.store(true, Ordering::Release);
    }
}

impl Hub {
    /// The hub over one connected stream per node (in node order): a reader thread each,
    /// and the heartbeat to all of them.
    pub(crate) fn open(
        streams: Vec<TcpStream>,
        children: Children,
        labels: Vec<String>,
    ) -> Result<Hub, ClusterError> {
        let (tx, rx) = mpsc::channel();
        let mut conns = Vec::with_capacity(streams.len());
        for (i, s) in streams.into_iter().enumerate() {
            conns.push(Conn::open(s, i as u16, tx.clone(), true).map_err(|e| {
                ClusterError::Failed(format!("{}: its connection: {e}", labels[i]))
            })?);
        }
        let beats = Arc::new(AtomicBool::new(false));
        heartbeat(conns.clone(), beats.clone());
        Ok(Hub {
            conns,
            rx,
            children,
            labels,
            beats,
            intervals: None,
            interval_index_max: 0,
        })
    }

    pub(crate) fn send(&mut self, node: u16, m: &Msg) -> Result<(), ClusterError> {
        self.conns[node as usize].send(m).map_err(|e| {
            ClusterError::Failed(format!(
                "{}: its connection failed: {e}",
                self.labels[node as usize]
            ))
        })
    }

    pub(crate) fn broadcast(&mut self, m: &Msg) -> Result<(), ClusterError> {
        for n in 0..self.conns.len() as u16 {
            self.send(n, m)?;
        }
        Ok(())
    }

    /// Tells every node the run failed, as far as each can still be told.
    pub(crate) fn tell_failed(&mut self, e: &ClusterError) {
        let m = Msg::Failed {
            bad_input: false,
            message: e.to_string(),
        };
        for c in &self.conns {
            let _ = c.send(&m);
        }
    }

    /// Bootstrap steps 2 to 6: `config` (`args`, `transport`) to every node, their `joined`,
    /// the `directory`, their `ready`, `start`, their `done` (within `run` and the margins),
    /// `stop`. Returns when every node had joined (loaded and registered its memory).
    pub(crate) fn run_nodes(
        &mut self,
        args: &[String],
        transport: Transports,
        run: Duration,
        started: &dyn Fn(),
    ) -> Result<Instant, ClusterError> {
        self.broadcast(&Msg::Config {
            version: PROTOCOL_VERSION,
            args: args.to_vec(),
            transport: transport.name().to_string(),
        })?;
        let startup = Instant::now() + Duration::from_secs(STARTUP_S_MAX);
        let joined = self.gather("joined", startup)?;
        let joined_at = Instant::now();
        let nodes = joined
            .into_iter()
            .map(|m| match m {
                Msg::Joined { workers, regions } => (workers, regions),
                _ => unreachable!("gather checked the name"),
            })
            .collect();
        self.broadcast(&Msg::Directory { nodes })?;
        self.gather("ready", startup)?;
        self.broadcast(&Msg::Start)?;
        started();
        let run_end = Instant::now()
            + run
            + Duration::from_secs_f64(RUN_MARGIN_S)
            + Duration::from_millis(ucx::OP_TIMEOUT_MS_DEFAULT);
        self.gather("done", run_end)?;
        self.broadcast(&Msg::Stop)?;
        Ok(joined_at)
    }

    /// Node `i`'s progress interval, forwarded to the run's collector (if one listens).
    fn interval(
        &self,
        i: u16,
        interval: atoll_runner::stats::Interval,
    ) -> Result<(), ClusterError> {
        if interval.index > self.interval_index_max {
            return Err(ClusterError::BadInput(format!(
                "{} sent progress interval {}, beyond the run's last ({})",
                self.labels[i as usize], interval.index, self.interval_index_max
            )));
        }
        if let Some(tx) = &self.intervals {
            let _ = tx.send(interval);
        }
        Ok(())
    }

    /// One `want` message from every node, in node order; any other message, a closed
    /// connection, an exited child, a node silent for a heartbeat silence or the deadline
    /// ends the run, naming the node.
    pub(crate) fn gather(&mut self, want: &str, until: Instant) -> Result<Vec<Msg>, ClusterError> {
        let n = self.conns.len();
        let mut got: Vec<Option<Msg>> = (0..n).map(|_| None).collect();
        while got.iter().any(Option::is_none) {
            let now = Instant::now();
            if now > until {
                let missing: Vec<&str> = got
                    .iter()
                    .enumerate()
                    .filter(|(_, m)| m.is_none())
                    .map(|(i, _)| self.labels[i].as_str())
                    .collect();
                return Err(ClusterError::Failed(format!(
                    "{} sent no '{want}' in time",
                    missing.join(", ")
                )));
            }
            let wait = until
                .saturating_duration_since(now)
                .min(Duration::from_millis(WATCH_INTERVAL_MS));
            match self.rx.recv_timeout(wait) {
                Ok((i, Ok(m))) if m.name() == want && got[i as usize].is_none() => {
                    got[i as usize] = Some(m)
                }
                Ok((i, Ok(Msg::Interval { interval }))) => self.interval(i, interval)?,
                Ok((i, Ok(Msg::Failed { bad_input, message }))) => {
                    return Err(if bad_input {
                        ClusterError::BadInput(message)
                    } else {
                        ClusterError::Failed(format!(
                            "{} failed: {message}",
                            self.labels[i as usize]
                        ))
                    })
                }
                Ok((i, Ok(m))) => {
                    return Err(ClusterError::BadInput(format!(
                        "{} sent '{}' where '{want}' was expected",
                        self.labels[i as usize],
                        m.name()
                    )))
                }
                Ok((i, Err(ReadError::Malformed(e)))) => {
                    return Err(ClusterError::BadInput(format!(
                        "malformed message from {}: {e}",
                        self.labels[i as usize]
                    )))
                }
                Ok((i, Err(ReadError::Closed))) => {
                    // Give its exit status a moment to appear, to say how it ended.
                    std::thread::sleep(Duration::from_millis(WATCH_INTERVAL_MS));
                    let how = self
                        .children
                        .procs
                        .get_mut(i as usize)
                        .and_then(|c| c.try_wait().ok().flatten())
                        .map(describe_exit)
                        .unwrap_or_else(|| "closed its connection".into());
                    return Err(ClusterError::Failed(format!(
                        "{} {how} (waiting for '{want}')",
                        self.labels[i as usize]
                    )));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(ClusterError::Failed("every node connection closed".into()))
                }
            }
            if let Some((i, how)) = self.children.exited() {
                if got[i as usize].is_none() || want != "bye" {
                    return Err(ClusterError::Failed(format!(
                        "{} {how} (waiting for '{want}')",
                        self.labels[i as usize]
                    )));
                }
            }
            if let Some((i, d)) = self
                .conns
                .iter()
                .enumerate()
                .find_map(|(i, c)| c.silent_for().map(|d| (i, d)))
            {
                return Err(ClusterError::Failed(format!(
                    "{} hangs: it sent nothing for {:.1} s, more than {HEARTBEAT_MISSED_MAX} heartbeats of {HEARTBEAT_INTERVAL_MS} ms (stopped or wedged; waiting for '{want}')",
                    self.labels[i],
                    d.as_secs_f64()
                )));
            }
        }
        Ok(got.into_iter().map(|m| m.expect("all arrived")).collect())
    }
}

/// Starts the node processes and connects to each: the hub, once every node said hello.
pub(crate) fn start_nodes(nodes: u16, program: &NodeProgram) -> Result<Hub, ClusterError> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| ClusterError::BadInput(format!("cannot listen on 127.0.0.1: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ClusterError::Failed(format!("listener: {e}")))?;
    let mut children = Children { procs: Vec::new() };
    for n in 0..nodes {
        let child = program
            .command(&addr.to_string(), n)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| {
                ClusterError::Failed(format!(
                    "cannot start node {n} ({}): {e}",
                    program.exe().display()
                ))
            })?;
        children.procs.push(child);
    }
    listener
        .set_nonblocking(true)
        .map_err(|e| ClusterError::Failed(format!("listener: {e}")))?;
    let until = Instant::now() + Duration::from_secs(STARTUP_S_MAX);
    let mut outs: Vec<Option<TcpStream>> = (0..nodes).map(|_| None).collect();
    let mut accepted = 0;
    while accepted < nodes {
        if Instant::now() > until {
            return Err(ClusterError::Failed(format!(
                "only {accepted} of {nodes} nodes connected within {STARTUP_S_MAX} s"
            )));
        }
        if let Some((i, how)) = children.exited() {
            return Err(ClusterError::Failed(format!(
                "node {i} {how} before it joined"
            )));
        }
        let mut s = match listener.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(e) => return Err(ClusterError::Failed(format!("accept: {e}"))),
        };
        let _ = s.set_nonblocking(false);
        let _ = s.set_read_timeout(Some(Duration::from_secs(STARTUP_S_MAX)));
        let node = match read_msg(&mut s) {
            Ok(Msg::Hello { version, node }) => {
                if version != PROTOCOL_VERSION {
                    return Err(ClusterError::BadInput(format!(
                        "a node speaks protocol version {version}, the coordinator {PROTOCOL_VERSION}"
                    )));
                }
                if node >= nodes || outs[node as usize].is_some() {
                    return Err(ClusterError::BadInput(format!(
                        "a node said hello as node {node}: not one of 0..{nodes} still expected"
                    )));
                }
                node
            }
            Ok(m) => {
                return Err(ClusterError::BadInput(format!(
                    "a node's first message was '{}', not 'hello'",
                    m.name()
                )))
            }
            Err(ReadError::Malformed(e)) => {
                return Err(ClusterError::BadInput(format!(
                    "malformed message from a joining node: {e}"
                )))
            }
            Err(ReadError::Closed) => continue,
        };
        outs[node as usize] = Some(s);
        accepted += 1;
    }
    let labels = children
        .procs
        .iter()
        .enumerate()
        .map(|(i, c)| format!("node {i} (pid {})", c.id()))
        .collect();
    let streams = outs.into_iter().map(|s| s.expect("every node")).collect();
    Hub::open(streams, children, labels)
}

/// Dials the nodes waiting at `hosts` (`atoll node --listen`) and claims node `i` at the
/// `i`-th: the hub, once every node said hello. An address that cannot be reached or does
/// not answer as a free atoll node is bad input naming the entry; the nodes already
/// claimed are told the run failed (they exit), so nothing is left waiting for this run.
pub(crate) fn dial_nodes(hosts: &[Host]) -> Result<Hub, ClusterError> {
    let nodes = hosts.len() as u16;
    let mut streams: Vec<TcpStream> = Vec::with_capacity(hosts.len());
    let claim = |i: u16, h: &Host| -> Result<TcpStream, ClusterError> {
        let entry = format!("--hosts entry '{}' (node {i})", h.given);
        let mut s = TcpStream::connect_timeout(&h.addr, Duration::from_secs(CONNECT_S_MAX))
            .map_err(|e| ClusterError::BadInput(format!("cannot reach {entry}: {e}")))?;
        let _ = s.set_nodelay(true);
        let _ = s.set_read_timeout(Some(Duration::from_secs(HANDSHAKE_S_MAX)));
        let _ = s.set_write_timeout(Some(Duration::from_secs(HANDSHAKE_S_MAX)));
        write_msg(
            &mut s,
            &Msg::Claim {
                version: PROTOCOL_VERSION,
                node: i,
                nodes,
            },
        )
        .map_err(|e| ClusterError::BadInput(format!("cannot claim {entry}: {e}")))?;
        match read_msg(&mut s) {
            Ok(Msg::Hello { version, node }) if version == PROTOCOL_VERSION && node == i => Ok(s),
            Ok(Msg::Hello { version, node }) => Err(ClusterError::BadInput(format!(
                "{entry} answered as node {node} speaking protocol version {version}, expected node {i} and version {PROTOCOL_VERSION}"
            ))),
            Ok(Msg::Failed { message, .. }) => {
                Err(ClusterError::BadInput(format!("{entry}: {message}")))
            }
            Ok(m) => Err(ClusterError::BadInput(format!(
                "{entry} sent '{}' where 'hello' was expected",
                m.name()
            ))),
            Err(ReadError::Malformed(e)) => Err(ClusterError::BadInput(format!(
                "{entry} is not an atoll node: {e}"
            ))),
            Err(ReadError::Closed) => Err(ClusterError::BadInput(format!(
                "{entry} closed the connection or did not answer within {HANDSHAKE_S_MAX} s: is `atoll node --listen {}` waiting there?",
                h.given
            ))),
        }
    };
    for (i, h) in hosts.iter().enumerate() {
        match claim(i as u16, h) {
            Ok(s) => streams.push(s),
            Err(e) => {
                let m = Msg::Failed {
                    bad_input: true,
                    message: e.to_string(),
                };
                for s in &mut streams {
                    let _ = write_msg(s, &m);
                }
                return Err(e);
            }
        }
    }
    let labels = hosts
        .iter()
        .enumerate()
        .map(|(i, h)| format!("node {i} ({})", h.given))
        .collect();
    Hub::open(streams, Children { procs: Vec::new() }, labels)
}

/// Whether this build can run a cluster: `BadInput` saying how to install UCX if not.
pub fn ucx_available() -> Result<(), ClusterError> {
    match ucx::Context::ucx_version() {
        Err(e @ ucx::UcxError::NotBuilt) => Err(ClusterError::BadInput(e.to_string())),
        _ => Ok(()),
    }
}

/// `atoll cluster ... bench`: runs `cfg` on `cfg.nodes` node processes over UCX and
/// returns the same report `atoll bench` builds, with the transport's verbs described.
/// Its progress (phases, the cluster's intervals as the nodes send them, heartbeats) goes to
/// `progress`.
pub fn run_cluster(
    cfg: &RunConfig,
    cc: &ClusterConfig,
    progress: &ProgressFn<'_>,
) -> Result<Report, ClusterError> {
    cfg.validate()?;
    ucx_available()?;
    struct V<'a> {
        cfg: &'a RunConfig,
        cc: &'a ClusterConfig,
        progress: &'a ProgressFn<'a>,
    }
    impl ProtocolVisitor for V<'_> {
        type Out = Result<Report, ClusterError>;
        fn visit<P: Protocol>(self) -> Self::Out {
            let (cfg, cc, progress) = (self.cfg, self.cc, self.progress);
            atoll_txn::check_plan::<P>(&cfg.plan)
                .map_err(|e| ClusterError::BadInput(format!("plan {}: {e}", cfg.plan)))?;
            struct Coordinate<'a, P> {
                cfg: &'a RunConfig,
                cc: &'a ClusterConfig,
                progress: &'a ProgressFn<'a>,
                protocol: std::marker::PhantomData<fn() -> P>,
            }
            impl<P: Protocol> WorkloadVisitor for Coordinate<'_, P> {
                type Out = Result<Report, ClusterError>;
                fn visit<W: Workload>(self, w: W) -> Self::Out {
                    coordinate::<W, P>(self.cfg, w, self.cc, self.progress)
                }
            }
            let v = Coordinate::<P> {
                cfg,
                cc,
                progress,
                protocol: std::marker::PhantomData,
            };
            cfg.workload
                .dispatch(&cfg.params, &cfg.workload_shape(), v)
                .map_err(|e| ClusterError::BadInput(e.0))?
        }
    }
    cfg.protocol.dispatch(V { cfg, cc, progress })
}

/// [`run_cluster`] of a workload the caller built (the library's): `cc.program` must be a
/// [`NodeProgram::Library`] whose nodes build the same workload and serve it with
/// [`serve_library_node`].
pub fn run_cluster_workload<W: Workload>(
    cfg: &RunConfig,
    w: W,
    cc: &ClusterConfig,
    progress: &ProgressFn<'_>,
) -> Result<Report, ClusterError> {
    cfg.validate()?;
    ucx_available()?;
    struct V<'a, W> {
        cfg: &'a RunConfig,
        w: W,
        cc: &'a ClusterConfig,
        progress: &'a ProgressFn<'a>,
    }
    impl<W: Workload> ProtocolVisitor for V<'_, W> {
        type Out = Result<Report, ClusterError>;
        fn visit<P: Protocol>(self) -> Self::Out {
            atoll_txn::check_plan::<P>(&self.cfg.plan)
                .map_err(|e| ClusterError::BadInput(format!("plan {}: {e}", self.cfg.plan)))?;
            coordinate::<W, P>(self.cfg, self.w, self.cc, self.progress)
        }
    }
    cfg.protocol.dispatch(V {
        cfg,
        w,
        cc,
        progress,
    })
}

/// Without `--memory-max`, each memory node of an `atoll cluster` run has room for its
/// tables to grow to this many times their start, and at least [`CLUSTER_GROWTH_MIN_BYTES`]
/// more.
pub const CLUSTER_GROWTH_FACTOR: u64 = 4;
pub const CLUSTER_GROWTH_MIN_BYTES: u64 = 128 << 20;

/// How the sizing line names [`cluster_budget`]'s default (no `--memory-max`).
pub fn cluster_budget_source() -> String {
    format!("atoll cluster's default: room for each memory node's tables to grow {CLUSTER_GROWTH_FACTOR}x; --memory-max gives more")
}

/// The budget of an `atoll cluster` run: `--memory-max`, or else what it takes at start with
/// room for each memory node's tables to grow ([`CLUSTER_GROWTH_FACTOR`]), within the
/// machine's share. Each node process reserves its share at start (UCX allocates its
/// regions whole, so peers on this machine can map them), so the default is not a share of
/// the machine's memory per process.
pub fn cluster_budget(cfg: &RunConfig, sizing: &atoll_runner::sizing::Sizing) -> u64 {
    cfg.memory_max_bytes.unwrap_or_else(|| {
        let room = (sizing
            .table_start_bytes
            .saturating_mul(CLUSTER_GROWTH_FACTOR))
        .max(CLUSTER_GROWTH_MIN_BYTES)
        .saturating_mul(sizing.memory_nodes as u64);
        sizing
            .start_bytes_beside_tables()
            .saturating_add(room)
            .min(sizing.memory_max_bytes)
    })
}

pub(crate) fn coordinate<W: Workload, P: Protocol>(
    cfg: &RunConfig,
    w: W,
    cc: &ClusterConfig,
    progress: &ProgressFn<'_>,
) -> Result<Report, ClusterError> {
    let wall = Instant::now();
    let mut cfg = cfg.clone();
    cfg.regions_whole = true;
    let sizing = atoll_runner::run::layout::<W, P>(&cfg, &w)?.sizing;
    let mut cc = cc.clone();
    cfg.memory_max_bytes = Some(cluster_budget(&cfg, &sizing));
    if !cc.bench_args.iter().any(|a| a == "--memory-max") {
        cfg.memory_max_from = Some(cluster_budget_source());
        // Every node resolves the flags as the coordinator did: with this budget too.
        cc.bench_args.extend([
            "--memory-max".to_string(),
            cfg.memory_max_bytes.unwrap_or_default().to_string(),
        ]);
    }
    let (cfg, cc) = (&cfg, &cc);
    let sizing = atoll_runner::run::layout::<W, P>(cfg, &w)?.sizing;
    // Only the nodes on this machine count against its cores and memory.
    let (local, what) = match &cc.hosts {
        Some(hosts) => {
            let local = hosts.iter().filter(|h| h.is_local()).count() as u16;
            (local, format!("{local} --hosts entries on this machine"))
        }
        None => (cfg.nodes, format!("--nodes {}", cfg.nodes)),
    };
    atoll_runner::sizing::cluster_fits(
        local,
        cfg.threads,
        &what,
        &sizing,
        &atoll_runner::sizing::Machine::this(),
    )?;
    // Node processes on this machine's cores, or other machines' (then the probe still
    // tells whether this one moved).
    let probe = atoll_runner::env::Probe::start(true);
    let hub = match &cc.hosts {
        Some(hosts) => dial_nodes(hosts)?,
        None => start_nodes(cfg.nodes, &cc.program)?,
    };
    with_hub(hub, |hub| {
        coordinate_nodes::<W, P>(cfg, &w, cc, hub, (wall, progress), &sizing, &probe)
    })
}

/// Starts `nodes` node processes of `exe` and runs `body` with their hub ([`with_hub`]).
pub(crate) fn with_nodes<T>(
    nodes: u16,
    exe: &std::path::Path,
    body: impl FnOnce(&mut Hub) -> Result<T, ClusterError>,
) -> Result<T, ClusterError> {
    with_hub(start_nodes(nodes, &NodeProgram::Atoll(exe.into()))?, body)
}

/// Runs `body` with `hub`'s nodes, then ends them: reaped when `body` succeeded, told and
/// killed when it failed. No child outlives the call.
pub(crate) fn with_hub<T>(
    mut hub: Hub,
    body: impl FnOnce(&mut Hub) -> Result<T, ClusterError>,
) -> Result<T, ClusterError> {
    let r = body(&mut hub);
    match &r {
        Ok(_) => hub.children.reap(Duration::from_secs(FINISH_S_MAX)),
        Err(e) => {
            hub.tell_failed(e);
            hub.children.kill_all();
        }
    }
    r
}

pub(crate) fn coordinate_nodes<W: Workload, P: Protocol>(
    cfg: &RunConfig,
    w: &W,
    cc: &ClusterConfig,
    hub: &mut Hub,
    run_at: (Instant, &ProgressFn<'_>),
    sizing: &atoll_runner::sizing::Sizing,
    probe: &atoll_runner::env::Probe,
) -> Result<Report, ClusterError> {
    let (wall, progress) = run_at;
    let run = Duration::from_secs_f64(cfg.warmup_s + cfg.duration_s);
    let pulse = Pulse::new(progress);
    let workers = cfg.nodes as usize * cfg.threads as usize;
    let interval_ns = (cfg.progress_interval_s * 1e9).max(1e6) as u64;
    // The last interval a run closes, with room for one closed after the end it was told.
    hub.interval_index_max = (run.as_nanos() as u64 / interval_ns).saturating_add(2);
    let budget_bytes = cfg.memory_max_bytes.unwrap_or(0) / cfg.nodes.max(1) as u64;
    let (ran, lines) = std::thread::scope(|s| {
        s.spawn(|| {
            pulse.beat(&|phase, wall_s| match phase {
                "running" => format!("{wall_s:.0} s of {:.1} s", run.as_secs_f64()),
                _ => String::new(),
            })
        });
        let (tx, rx) = mpsc::channel();
        let report = |p: &Progress<'_>| pulse.report(p);
        let printer =
            s.spawn(move || collect_progress(rx, workers, interval_ns, budget_bytes, &report));
        hub.intervals = Some(tx);
        pulse.phase(
            "loading",
            &format!("{} node processes load their tables", cfg.nodes),
        );
        let started = || pulse.phase("running", "");
        // Every interval arrives before its node's summary: both are gathered here.
        let ran = hub
            .run_nodes(&cc.bench_args, cc.transport, run, &started)
            .and_then(|joined_at| {
                let finish = Instant::now() + Duration::from_secs(FINISH_S_MAX);
                Ok((joined_at, hub.gather("summary", finish)?))
            });
        hub.intervals = None;
        let lines = printer.join().expect("the progress collector panicked");
        if ran.is_ok() {
            pulse.phase("checking", "");
        }
        pulse.stop();
        (ran, lines)
    });
    let (joined_at, summaries) = ran?;
    let load_s = joined_at.duration_since(wall).as_secs_f64();
    let facts = RunFacts {
        warmup_end_ns: (cfg.warmup_s * 1e9) as u64,
        progress: lines,
        load_s,
        wall_s: 0.0,
        os_threads: cfg.nodes as usize * cfg.threads as usize,
        sim: None,
        log_ring_words: sizing.log_ring_words,
        memory_bytes: sizing.total_bytes(),
        tables_start_bytes: sizing.table_start_bytes * sizing.memory_nodes as u64,
        coroutines_hung: 0,
        // No injected crashes here: a process that died is named by the failure itself.
        crashed: Vec::new(),
        recovered: Vec::new(),
        // Each node counts what its workers served and says so in its summary.
        rpcs_served_by_node: Vec::new(),
    };
    let cpu = atoll_runner::env::CpuWindow::default();
    let mut nodes = HubNodes {
        hub: &mut *hub,
        finish: Instant::now() + Duration::from_secs(FINISH_S_MAX),
        summaries: Some(summaries),
    };
    let mut report =
        atoll_runner::driver::conclude::<W, P, _>(cfg, w, &mut nodes, facts, wall, |committed| {
            probe.finish(&cpu, committed)
        })?;
    hub.broadcast(&Msg::Bye)?;
    report.config.fabric = "ucx";
    report.ucx = Some(atoll_runner::report::UcxReport {
        transport: cc.transport.name().to_string(),
        processes: cfg.nodes,
        verbs: ucx::describe(cc.transport, cfg.coalesce)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    });
    if let (Some(path), true) = (&cfg.history_file, cfg.record_history) {
        let joined = join_history_parts(path, cfg.nodes, cfg.protocol.isolation());
        report.check_history_written(joined, "streamed by the nodes as the run went, then joined");
    }
    Ok(report)
}

/// Joins the parts of a history file the nodes streamed ([`history_part`]) into `path`, a
/// line at a time (memory stays bounded), and removes them; the number of attempts. A part
/// that is not on this machine (a node on another host) is named.
fn join_history_parts(
    path: &std::path::Path,
    nodes: u16,
    isolation: atoll_txn::Isolation,
) -> Result<u64, String> {
    use std::io::{BufRead as _, Write as _};
    let write_err = |e: std::io::Error| format!("writing history {}: {e}", path.display());
    let f = std::fs::File::create(path)
        .map_err(|e| format!("cannot create history file {}: {e}", path.display()))?;
    let mut out = std::io::BufWriter::new(f);
    writeln!(out, "{}", atoll_history::header_line(isolation)).map_err(write_err)?;
    let mut attempts = 0u64;
    for n in 0..nodes {
        let part = history_part(path, n);
        let f = std::fs::File::open(&part).map_err(|e| {
            format!(
                "node {n}'s part of the history, {}, cannot be read here ({e}): a node on another host keeps it on its machine",
                part.display()
            )
        })?;
        // Each part opens with its own header line.
        for line in std::io::BufReader::new(f).lines().skip(1) {
            let line = line.map_err(|e| format!("reading {}: {e}", part.display()))?;
            if !line.trim().is_empty() {
                writeln!(out, "{line}").map_err(write_err)?;
                attempts += 1;
            }
        }
        std::fs::remove_file(&part).map_err(|e| format!("removing {}: {e}", part.display()))?;
    }
    out.flush().map_err(write_err)?;
    Ok(attempts)
}

/// The node processes, stopped: summaries and checks gathered over the hub by `finish`.
struct HubNodes<'a> {
    hub: &'a mut Hub,
    finish: Instant,
    /// The nodes' `summary` messages, gathered with their last intervals.
    summaries: Option<Vec<Msg>>,
}

impl<W: Workload> StoppedNodes<W> for HubNodes<'_> {
    type Error = ClusterError;

    fn summaries(&mut self) -> Result<Vec<NodeSummary<W::Ledger>>, ClusterError> {
        let mut summaries = Vec::new();
        let gathered = match self.summaries.take() {
            Some(g) => g,
            None => self.hub.gather("summary", self.finish)?,
        };
        for (i, m) in gathered.into_iter().enumerate() {
            let Msg::Summary { summary } = m else {
                unreachable!("gather checked the name")
            };
            summaries.push(serde_json::from_value(summary).map_err(|e| {
                ClusterError::BadInput(format!("malformed summary from node {i}: {e}"))
            })?);
        }
        Ok(summaries)
    }

    fn checks(
        &mut self,
        ledger: &W::Ledger,
    ) -> Result<Vec<NodeChecks<W::NodeCheck>>, ClusterError> {
        self.hub.broadcast(&Msg::Ledger {
            ledger: json("the merged ledger", ledger),
        })?;
        let mut checks = Vec::new();
        for (i, m) in self
            .hub
            .gather("checks", self.finish)?
            .into_iter()
            .enumerate()
        {
            let Msg::Checks { checks: c } = m else {
                unreachable!("gather checked the name")
            };
            // A node holding no records has none to check.
            let c: Option<NodeChecks<W::NodeCheck>> = serde_json::from_value(c).map_err(|e| {
                ClusterError::BadInput(format!("malformed checks from node {i}: {e}"))
            })?;
            checks.extend(c);
        }
        Ok(checks)
    }
}
