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
//! ([`crate::driver`]).
//!
//! Failures: a node's connection that closes or a child that exits before Bye ends the run
//! (every child killed and reaped) with an error naming the node; so does a node that sends
//! nothing (not even its heartbeat, a Beat every [`HEARTBEAT_INTERVAL_MS`]) for
//! [`HEARTBEAT_SILENCE_MS_MAX`]: stopped or wedged. A node hears the coordinator's beats
//! the same way. Every wait is bounded.
//!
//! A node has a second mode, one side of `atoll fabric-bench` ([`crate::fabric_bench`]),
//! chosen by a Config whose first arg is [`crate::fabric_bench::MODE`]; same bootstrap.

use crate::config::{ConfigError, RunConfig};
use crate::driver::RunFacts;
use crate::hosts::Host;
use crate::node::{NodeChecks, NodeRuntime, NodeSummary};
use crate::report::Report;
use crate::run::{memory_task, worker_coroutines, RunError, RunShared};
use crate::stats::Interval;
use atoll_fabric::{Coroutine, NodeId};
use atoll_fabric_ucx::{self as ucx, Bootstrap, NodeAddresses, RunWatch, Transports};
use atoll_protocols::ProtocolVisitor;
use atoll_storage::Catalog;
use atoll_txn::{Protocol, TxnConfig};
use atoll_workloads::checkout::Checkout;
use atoll_workloads::cycle::Cycle;
use atoll_workloads::micro::Micro;
use atoll_workloads::skew::Skew;
use atoll_workloads::smallbank::SmallBank;
use atoll_workloads::tpcc::Tpcc;
use atoll_workloads::ycsb::Ycsb;
use atoll_workloads::{Workload, WorkloadKind};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Version of the coordinator-node protocol; both ends must speak the same. 2: `claim`
/// (a coordinator dialing a listening node) and `beat` (heartbeats). 3: over tcp the nodes'
/// one-sided verbs are Atoll's own active messages (`AM_VERB` in atoll-fabric-ucx). 4: a
/// payload's check word is seeded from the key's index hash (`payload_check_hashed`), so
/// nodes of older builds would find every record written by newer ones torn.
pub const PROTOCOL_VERSION: u32 = 4;
/// Largest message accepted (a summary with in-memory history can be large).
pub const MESSAGE_BYTES_MAX: usize = 1 << 30;
/// Received active messages a node's worker may hold per coordinator of the cluster.
const AM_INBOX_MESSAGES_PER_COORDINATOR: usize = 64;
/// How long the coordinator waits for every node to connect, join, connect its workers.
pub const STARTUP_S_MAX: u64 = 120;
/// Seconds past warm-up + duration the coordinator waits for every node to be done (the
/// last transactions finish, retries back off).
pub const RUN_MARGIN_S: f64 = 60.0;
/// How long the end of a run (summaries, checks) may take.
pub const FINISH_S_MAX: u64 = 120;
/// How often the coordinator looks at its children while it waits (a child that exits is
/// noticed within this, or at once when its connection closes).
pub const WATCH_INTERVAL_MS: u64 = 50;
/// How often each end of a connection sends a Beat. A beat is an 18-byte frame: five a
/// second per node costs nothing, and it is frequent enough that a missed one is news.
pub const HEARTBEAT_INTERVAL_MS: u64 = 200;
/// Beats a connection may miss before its other end is declared hung. Ten: a beat comes
/// from a thread of its own, which on an oversubscribed machine (at most
/// [`crate::sizing::OVERSUBSCRIPTION_MAX`] busy threads per core) waits for a core a few
/// scheduler slices (tens of ms), far from ten intervals; anything that arrives (a large
/// summary in transit too) counts as a beat.
pub const HEARTBEAT_MISSED_MAX: u64 = 10;
/// Silence after which a peer is hung: [`HEARTBEAT_MISSED_MAX`] intervals.
pub const HEARTBEAT_SILENCE_MS_MAX: u64 = HEARTBEAT_INTERVAL_MS * HEARTBEAT_MISSED_MAX;
// A hung node must be named by the heartbeat before its peers' ops to it time out (which
// would end the run naming the wrong side, or not at all).
const _: () = assert!(HEARTBEAT_SILENCE_MS_MAX < ucx::OP_TIMEOUT_MS_DEFAULT);
/// How long the coordinator tries to reach a `--hosts` node (TCP connect): an address
/// that does not answer in this is unreachable.
pub const CONNECT_S_MAX: u64 = 10;
/// How long a dialed node may take to answer the claim (a listening `atoll node` answers
/// at once; anything else on that port is not one).
pub const HANDSHAKE_S_MAX: u64 = 10;
/// How long `atoll node --listen` waits for a coordinator: an hour, time to start the other
/// nodes by hand; then it exits (code 1) so a forgotten node does not stay.
pub const LISTEN_WAIT_S_MAX: u64 = 3600;

/// One message between coordinator and node.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "msg", rename_all = "snake_case")]
pub enum Msg {
    Hello {
        version: u32,
        node: u16,
    },
    /// A coordinator to a listening node: you are node `node` of `nodes`.
    Claim {
        version: u32,
        node: u16,
        nodes: u16,
    },
    /// A heartbeat: the sender is alive (never forwarded past the reader).
    Beat,
    Config {
        version: u32,
        args: Vec<String>,
        transport: String,
    },
    Joined {
        workers: Vec<Vec<u8>>,
        regions: Vec<Vec<u8>>,
    },
    Directory {
        nodes: Vec<(Vec<Vec<u8>>, Vec<Vec<u8>>)>,
    },
    Ready,
    Start,
    Done,
    Stop,
    Summary {
        summary: serde_json::Value,
    },
    Ledger {
        ledger: serde_json::Value,
    },
    Checks {
        checks: serde_json::Value,
    },
    Bye,
    /// The sender gives up: bad input (exit 2) or a failed run.
    Failed {
        bad_input: bool,
        message: String,
    },
}

impl Msg {
    fn name(&self) -> &'static str {
        match self {
            Msg::Hello { .. } => "hello",
            Msg::Claim { .. } => "claim",
            Msg::Beat => "beat",
            Msg::Config { .. } => "config",
            Msg::Joined { .. } => "joined",
            Msg::Directory { .. } => "directory",
            Msg::Ready => "ready",
            Msg::Start => "start",
            Msg::Done => "done",
            Msg::Stop => "stop",
            Msg::Summary { .. } => "summary",
            Msg::Ledger { .. } => "ledger",
            Msg::Checks { .. } => "checks",
            Msg::Bye => "bye",
            Msg::Failed { .. } => "failed",
        }
    }
}

/// Why a cluster run (coordinator or node) ended without a report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterError {
    /// Bad input: flags, a malformed or mismatched message, UCX missing. Exit 2.
    BadInput(String),
    /// A node failed (its process exited, its connection closed, it reported a failure),
    /// or the run did. Exit 1.
    Failed(String),
}

impl std::fmt::Display for ClusterError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClusterError::BadInput(m) | ClusterError::Failed(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ClusterError {}

impl From<RunError> for ClusterError {
    fn from(e: RunError) -> Self {
        match e {
            RunError::Config(c) => ClusterError::BadInput(c.0),
            e => ClusterError::Failed(e.to_string()),
        }
    }
}

impl From<ConfigError> for ClusterError {
    fn from(e: ConfigError) -> Self {
        ClusterError::BadInput(e.0)
    }
}

/// What reading a message can meet.
#[derive(Debug)]
enum ReadError {
    Closed,
    Malformed(String),
}

fn frame(m: &Msg) -> Vec<u8> {
    let body = serde_json::to_vec(m).expect("messages serialize");
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    frame
}

fn write_msg(s: &mut TcpStream, m: &Msg) -> std::io::Result<()> {
    s.write_all(&frame(m))
}

fn read_msg(s: &mut impl Read) -> Result<Msg, ReadError> {
    read_frame(s).and_then(|body| decode_msg(&body))
}

/// A message's bytes, its length checked.
fn read_frame(s: &mut impl Read) -> Result<Vec<u8>, ReadError> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len).map_err(|_| ReadError::Closed)?;
    let len = u32::from_le_bytes(len) as usize;
    if len > MESSAGE_BYTES_MAX {
        return Err(ReadError::Malformed(format!(
            "a message announces {len} bytes, more than the {MESSAGE_BYTES_MAX} accepted"
        )));
    }
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).map_err(|_| ReadError::Closed)?;
    Ok(body)
}

fn decode_msg(body: &[u8]) -> Result<Msg, ReadError> {
    serde_json::from_slice(body).map_err(|e| {
        let head = String::from_utf8_lossy(&body[..body.len().min(40)]).into_owned();
        ReadError::Malformed(format!("{head:?} is not a message: {e}"))
    })
}

/// Milliseconds since this process first asked: the clock of [`Conn::heard_ms`].
fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// A stream that stamps `heard_ms` whenever bytes arrive, so a large message in transit
/// counts as a sign of life as much as a beat does.
struct Stamped {
    s: TcpStream,
    heard_ms: Arc<AtomicU64>,
}

impl Read for Stamped {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.s.read(buf)?;
        if n > 0 {
            self.heard_ms.store(now_ms(), Ordering::Release);
        }
        Ok(n)
    }
}

/// One end of a coordinator-node connection: the writer (shared with the heartbeat
/// thread) and when the other end was last heard.
#[derive(Clone)]
struct Conn {
    out: Arc<Mutex<TcpStream>>,
    heard_ms: Arc<AtomicU64>,
}

/// `Conn::heard_ms` before anything arrived on a connection watched from its first byte.
const UNHEARD_MS: u64 = u64::MAX;

impl Conn {
    /// Wraps a connected stream: writes time out once the other end stops reading for a
    /// heartbeat silence (it is hung); a thread reads its messages into `tx`, tagged `tag`.
    /// The other end's silence counts from now if `watch_now`, else from the first bytes
    /// it sends (a node's coordinator beats only once every node said hello; until then
    /// the start-up bound applies).
    fn open(
        s: TcpStream,
        tag: u16,
        tx: mpsc::Sender<(u16, Result<Msg, ReadError>)>,
        watch_now: bool,
    ) -> std::io::Result<Conn> {
        s.set_nodelay(true)?;
        s.set_read_timeout(None)?;
        s.set_write_timeout(Some(Duration::from_millis(HEARTBEAT_SILENCE_MS_MAX)))?;
        let heard_ms = Arc::new(AtomicU64::new(if watch_now {
            now_ms()
        } else {
            UNHEARD_MS
        }));
        reader(
            Stamped {
                s: s.try_clone()?,
                heard_ms: heard_ms.clone(),
            },
            tag,
            tx,
        );
        Ok(Conn {
            out: Arc::new(Mutex::new(s)),
            heard_ms,
        })
    }

    fn send(&self, m: &Msg) -> std::io::Result<()> {
        // Encoded before the writer is taken: a large message (a summary carrying its
        // history) takes seconds to encode, and the heartbeat skips a busy writer.
        let f = frame(m);
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        out.write_all(&f)
    }

    /// How long the other end has been silent, if longer than a heartbeat silence.
    fn silent_for(&self) -> Option<Duration> {
        let heard = self.heard_ms.load(Ordering::Acquire);
        if heard == UNHEARD_MS {
            return None;
        }
        let ms = now_ms().saturating_sub(heard);
        (ms > HEARTBEAT_SILENCE_MS_MAX).then(|| Duration::from_millis(ms))
    }
}

/// Sends a Beat on every connection every [`HEARTBEAT_INTERVAL_MS`] until `stop` (or the
/// process) ends. A connection whose writer is busy (a large message going out, or a
/// write to a hung peer waiting for its timeout) is skipped: bytes flowing count as beats.
fn heartbeat(conns: Vec<Conn>, stop: Arc<AtomicBool>) {
    let beat = frame(&Msg::Beat);
    std::thread::spawn(move || {
        while !stop.load(Ordering::Acquire) {
            for c in &conns {
                if let Ok(mut out) = c.out.try_lock() {
                    let _ = out.write_all(&beat);
                }
            }
            std::thread::sleep(Duration::from_millis(HEARTBEAT_INTERVAL_MS));
        }
    });
}

/// Reads messages from `stream` on a thread of its own into `tx`, tagged with `tag`, until
/// the stream closes or a message is malformed (both forwarded). Beats only stamp.
fn reader(
    mut stream: Stamped,
    tag: u16,
    tx: mpsc::Sender<(u16, Result<Msg, ReadError>)>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || loop {
        let body = read_frame(&mut stream);
        // Decoding a large message (a summary carrying its history) takes seconds in which
        // the beats behind it wait unread: the other end's silence is not watched meanwhile
        // (it was alive: its message arrived whole), and counts again from the decoded end.
        stream.heard_ms.store(UNHEARD_MS, Ordering::Release);
        let m = body.and_then(|b| decode_msg(&b));
        stream.heard_ms.store(now_ms(), Ordering::Release);
        if matches!(m, Ok(Msg::Beat)) {
            continue;
        }
        let end = m.is_err();
        if tx.send((tag, m)).is_err() || end {
            return;
        }
    })
}

/// The transport a `--transport` value names (`auto`: shared memory, as every node of
/// `atoll cluster --nodes` runs on this machine).
pub fn parse_transport(s: &str) -> Result<Transports, ConfigError> {
    match s {
        "shm" | "auto" => Ok(Transports::SharedMemory),
        "tcp" => Ok(Transports::Tcp),
        other => Err(ConfigError(format!(
            "unknown transport '{other}': accepted transports are shm, tcp, auto"
        ))),
    }
}

/// The transport for nodes at `hosts`: `auto` is shared memory when every host is on this
/// machine (a loopback address), else tcp; `shm` is refused naming a host elsewhere.
pub fn hosts_transport(s: &str, hosts: &[Host]) -> Result<Transports, ConfigError> {
    let remote = hosts.iter().find(|h| !h.is_local());
    match (parse_transport(s)?, remote) {
        (Transports::SharedMemory, Some(_)) if s == "auto" => Ok(Transports::Tcp),
        (Transports::SharedMemory, Some(h)) => Err(ConfigError(format!(
            "--transport shm reaches only nodes on this machine, and --hosts entry '{}' is not a loopback address: use --transport tcp",
            h.given
        ))),
        (t, _) => Ok(t),
    }
}

// ---------------------------------------------------------------- the node

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
    fn open(s: TcpStream) -> Result<NodeLink, ClusterError> {
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

    pub(crate) fn send(&mut self, m: &Msg) -> Result<(), String> {
        self.conn
            .send(m)
            .map_err(|e| format!("the coordinator's connection: {e}"))
    }

    /// The coordinator is hung if it sent nothing for a heartbeat silence.
    fn coordinator_silent(&self, want: &str) -> Result<(), ClusterError> {
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
        })?;
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
        self.send(&Msg::Ready)?;
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
                self.send(&Msg::Done)?;
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

/// `atoll node --coordinator ADDR --node N` (started by `atoll cluster --nodes`): connects
/// to the coordinator at `coordinator`, serves node `node` of the run it describes (whose
/// `bench` flags `resolve` turns into a configuration), exits.
pub fn serve_node(
    coordinator: &str,
    node: u16,
    resolve: &dyn Fn(&[String]) -> Result<RunConfig, String>,
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
    serve(link, node, None, Vec::new(), resolve)
}

/// `atoll node --listen HOST:PORT`: listens there, says so on stdout (`listening on
/// ADDR`), waits up to [`LISTEN_WAIT_S_MAX`] for a coordinator to claim it (`atoll cluster
/// --hosts`), serves that one run and exits. While it serves, any other coordinator that
/// dials it is told it is busy (bad input on that side). Its UCX workers use the network
/// interface holding the listen address, so the worker addresses its peers get name it.
pub fn serve_listening(
    listen: &str,
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
        resolve,
    )
}

/// While this node serves a run, answers every other connection to its listener with
/// `failed {bad_input}`: it is busy. The thread ends with the process (the run is bounded).
fn refuse_others(listener: TcpListener, here: String, node: u16, nodes: u16, peer: SocketAddr) {
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
fn serve(
    mut link: NodeLink,
    node: u16,
    nodes: Option<u16>,
    net_devices: Vec<String>,
    resolve: &dyn Fn(&[String]) -> Result<RunConfig, String>,
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
    // The node's second mode: one side of `atoll fabric-bench`, not a `bench` run.
    if args.first().map(String::as_str) == Some(crate::fabric_bench::MODE) {
        let r = crate::fabric_bench::serve_node(&args[1..], NodeId(node), transports, &mut link);
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
    // The history travels in the summary; the coordinator writes the file.
    cfg.history_file = None;
    link.run_deadline = Instant::now()
        + Duration::from_secs_f64(cfg.warmup_s + cfg.duration_s + RUN_MARGIN_S)
        + Duration::from_secs(STARTUP_S_MAX);
    let settings = if transports == Transports::Tcp && !net_devices.is_empty() {
        vec![("NET_DEVICES".to_string(), net_devices.join(","))]
    } else {
        Vec::new()
    };
    let r = node_dispatch(&cfg, NodeId(node), transports, settings, &mut link);
    r.inspect_err(|e| link.fail(e))
}

impl NodeLink {
    /// Tells the coordinator this node gives up with `e` (a failure to tell it is moot: it
    /// sees the connection close).
    fn fail(&mut self, e: &ClusterError) {
        let _ = self.send(&Msg::Failed {
            bad_input: matches!(e, ClusterError::BadInput(_)),
            message: e.to_string(),
        });
    }
}

/// Runs `$body` with `$w` bound to the workload `$cfg` names (a closure cannot be generic).
/// `$stripe`: which of the processes that draw orders for the same memory nodes this one is
/// (checkout's order keys).
macro_rules! with_workload {
    ($cfg:expr, $stripe:expr, $w:ident => $body:expr) => {{
        let cfg: &RunConfig = $cfg;
        let (stripe_index, stripe_count): (u16, u16) = $stripe;
        let perr = |e: atoll_workloads::ParamError| ClusterError::BadInput(e.0);
        match cfg.workload {
            WorkloadKind::SmallBank => {
                let $w = SmallBank::from_params(&cfg.params).map_err(perr)?;
                $body
            }
            WorkloadKind::Ycsb => {
                let $w = Ycsb::from_params(&cfg.params, cfg.memory_nodes(), cfg.threads)
                    .map_err(perr)?;
                $body
            }
            WorkloadKind::Cycle => {
                let $w = Cycle::from_params(&cfg.params, cfg.memory_nodes()).map_err(perr)?;
                $body
            }
            WorkloadKind::Tpcc => {
                let $w = Tpcc::from_params(&cfg.params, cfg.memory_nodes()).map_err(perr)?;
                $body
            }
            WorkloadKind::Micro => {
                let $w = Micro::from_params(&cfg.params, cfg.memory_nodes()).map_err(perr)?;
                $body
            }
            WorkloadKind::Skew => {
                let $w = Skew::from_params(&cfg.params, cfg.memory_nodes()).map_err(perr)?;
                $body
            }
            WorkloadKind::Checkout => {
                let $w = Checkout::from_params(&cfg.params, cfg.memory_nodes())
                    .map_err(perr)?
                    .striped(stripe_index, stripe_count);
                $body
            }
        }
    }};
}

/// Which of the order-drawing processes node `node` is: under shared-data every compute
/// node draws orders for the memory nodes, so each takes its own stripe; partitioned, a
/// node draws for its own only.
fn order_stripe(cfg: &RunConfig, node: NodeId) -> (u16, u16) {
    let t = cfg.topology();
    match (t.architecture(), t.compute_index(node)) {
        (atoll_storage::Architecture::SharedData, Some(i)) => (i, t.compute_nodes()),
        _ => (0, 1),
    }
}

fn node_dispatch(
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
            with_workload!(cfg, order_stripe(cfg, node), w => node_with::<_, P>(cfg, w, node, t, settings.clone(), link))
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

/// The shared state of a run and its catalog, as every node and the coordinator build it.
fn layout<W: Workload, P: Protocol>(
    cfg: &RunConfig,
    w: &W,
) -> Result<(crate::sizing::Sizing, Arc<TxnConfig>, Arc<Catalog>), ClusterError> {
    // A variant no user selects (a broken one) keeps what its kind's knob says.
    let version_slots = if P::MULTI_VERSION {
        cfg.version_slots(cfg.protocol)
    } else {
        1
    };
    let sizing = crate::sizing::size(cfg, w, version_slots)?;
    let txn_cfg = Arc::new(cfg.txn_config(sizing.log_ring_words));
    let topology = cfg.topology();
    let catalog = Arc::new(
        Catalog::with_versions(
            topology.memory_nodes(),
            w.tables(topology.memory_nodes()),
            txn_cfg.extra_region_words(),
            version_slots,
        )
        .with_topology(topology)
        .with_lock_word(P::LOCK_WORD)
        .with_old_versions(P::OLD_VERSIONS)
        .with_overflow(if P::MULTI_VERSION {
            cfg.overflow_versions
        } else {
            0
        }),
    );
    Ok((sizing, txn_cfg, catalog))
}

fn json<T: Serialize>(what: &str, v: &T) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or_else(|e| panic!("{what} does not serialize: {e}"))
}

fn node_with<W: Workload, P: Protocol>(
    cfg: &RunConfig,
    w: W,
    node: NodeId,
    transports: Transports,
    settings: Vec<(String, String)>,
    link: &mut NodeLink,
) -> Result<(), ClusterError> {
    cfg.validate()?;
    let (_, txn_cfg, catalog) = layout::<W, P>(cfg, &w)?;
    let ucfg = ucx::UcxConfig {
        transports,
        settings,
        nodes: cfg.nodes,
        threads_per_node: cfg.threads,
        op_timeout_ns: ucx::OP_TIMEOUT_MS_DEFAULT * 1_000_000,
        // Over tcp every one-sided op is a message too, and a doorbell carries tens of them
        // (a TPC-C NewOrder's reads): room for each coordinator's whole doorbell.
        am_inbox_messages_max: ucx::AM_INBOX_MESSAGES_DEFAULT
            .max(cfg.coordinators_total() as usize * AM_INBOX_MESSAGES_PER_COORDINATOR),
        coalesce: cfg.coalesce,
    };
    // UCX allocates the node's words, so peers on this machine map them (real RMA over shm).
    let (arena, memory) = ucx::NodeArena::allocate(&ucfg, node, &catalog.region_words_of(node))
        .map_err(|e| ClusterError::BadInput(format!("node {}: {e}", node.0)))?;
    let runtime = Arc::new(NodeRuntime::load_into(
        node,
        catalog.clone(),
        &w,
        Arc::new(memory),
    )?);
    let setup = runtime.setup();
    let shared = Arc::new(RunShared {
        w,
        catalog,
        txn: txn_cfg,
        cfg: cfg.clone(),
        warmup_end_ns: (cfg.warmup_s * 1e9) as u64,
        end_ns: ((cfg.warmup_s + cfg.duration_s) * 1e9) as u64,
        interval_ns: (cfg.progress_interval_s * 1e9).max(1e6) as u64,
        failed_after_log: Default::default(),
        cpu: Default::default(),
        history_out: None,
        txn_cpu_ns: None,
    });
    // Progress lines stay in the node: the coordinator prints the summary only.
    let (tx_iv, rx_iv) = mpsc::channel::<Interval>();
    let drain = std::thread::spawn(move || for _ in rx_iv {});
    // A node that runs no coordinators (memory, timestamp) only serves.
    let spawn = |core: &Rc<atoll_fabric::WorkerCore>| -> Vec<Coroutine> {
        if !shared.catalog.topology().runs_coordinators(core.node()) {
            return memory_task::<W, P>(core, &shared, &runtime);
        }
        worker_coroutines::<W, P>(core, &shared, &runtime, cfg.coroutines, &tx_iv)
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
    let mut summary = runtime.summary(&shared.w);
    summary.rpcs_served = Some(served);
    link.send(&Msg::Summary {
        summary: json("a node summary", &summary),
    })
    .map_err(ClusterError::Failed)?;
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
    })
    .map_err(ClusterError::Failed)?;
    link.recv("bye", finish)?;
    Ok(())
}

// ---------------------------------------------------------------- the coordinator

/// How `atoll cluster` runs: the processes and what they run.
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    pub transport: Transports,
    /// The `bench` flags, as given (every node resolves them as the coordinator did).
    pub bench_args: Vec<String>,
    /// The `atoll` binary the nodes run (this one), when the nodes are started here.
    pub exe: std::path::PathBuf,
    /// `--hosts`: the nodes wait there (`atoll node --listen`), node `i` the `i`-th; `None`
    /// starts `cfg.nodes` children here.
    pub hosts: Option<Vec<Host>>,
}

/// The node processes; killed and reaped when dropped unless they ended.
struct Children {
    procs: Vec<Child>,
}

impl Children {
    /// The first child that exited, with how.
    fn exited(&mut self) -> Option<(u16, String)> {
        self.procs.iter_mut().enumerate().find_map(|(i, c)| {
            c.try_wait()
                .ok()
                .flatten()
                .map(|st| (i as u16, describe_exit(st)))
        })
    }

    /// Waits up to `within` for every child to exit by itself; kills what is left.
    fn reap(&mut self, within: Duration) {
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
    fn kill_all(&mut self) {
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

fn describe_exit(st: std::process::ExitStatus) -> String {
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
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.beats.store(true, Ordering::Release);
    }
}

impl Hub {
    /// The hub over one connected stream per node (in node order): a reader thread each,
    /// and the heartbeat to all of them.
    fn open(
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
        })
    }

    fn send(&mut self, node: u16, m: &Msg) -> Result<(), ClusterError> {
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
    fn tell_failed(&mut self, e: &ClusterError) {
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
        let run_end = Instant::now()
            + run
            + Duration::from_secs_f64(RUN_MARGIN_S)
            + Duration::from_millis(ucx::OP_TIMEOUT_MS_DEFAULT);
        self.gather("done", run_end)?;
        self.broadcast(&Msg::Stop)?;
        Ok(joined_at)
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
fn start_nodes(nodes: u16, exe: &std::path::Path) -> Result<Hub, ClusterError> {
    let listener = TcpListener::bind("127.0.0.1:0")
        .map_err(|e| ClusterError::BadInput(format!("cannot listen on 127.0.0.1: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ClusterError::Failed(format!("listener: {e}")))?;
    let mut children = Children { procs: Vec::new() };
    for n in 0..nodes {
        let child = Command::new(exe)
            .args([
                "node",
                "--coordinator",
                &addr.to_string(),
                "--node",
                &n.to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| {
                ClusterError::Failed(format!("cannot start node {n} ({}): {e}", exe.display()))
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
fn dial_nodes(hosts: &[Host]) -> Result<Hub, ClusterError> {
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
pub fn run_cluster(cfg: &RunConfig, cc: &ClusterConfig) -> Result<Report, ClusterError> {
    cfg.validate()?;
    ucx_available()?;
    struct V<'a> {
        cfg: &'a RunConfig,
        cc: &'a ClusterConfig,
    }
    impl ProtocolVisitor for V<'_> {
        type Out = Result<Report, ClusterError>;
        fn visit<P: Protocol>(self) -> Self::Out {
            let (cfg, cc) = (self.cfg, self.cc);
            atoll_txn::check_plan::<P>(&cfg.plan)
                .map_err(|e| ClusterError::BadInput(format!("plan {}: {e}", cfg.plan)))?;
            with_workload!(cfg, (0, 1), w => coordinate::<_, P>(cfg, w, cc))
        }
    }
    cfg.protocol.dispatch(V { cfg, cc })
}

fn coordinate<W: Workload, P: Protocol>(
    cfg: &RunConfig,
    w: W,
    cc: &ClusterConfig,
) -> Result<Report, ClusterError> {
    let wall = Instant::now();
    let (sizing, _, _) = layout::<W, P>(cfg, &w)?;
    // Only the nodes on this machine count against its cores and memory.
    let (local, what) = match &cc.hosts {
        Some(hosts) => {
            let local = hosts.iter().filter(|h| h.is_local()).count() as u16;
            (local, format!("{local} --hosts entries on this machine"))
        }
        None => (cfg.nodes, format!("--nodes {}", cfg.nodes)),
    };
    crate::sizing::cluster_fits(
        local,
        cfg.threads,
        &what,
        &sizing,
        &crate::sizing::Machine::this(),
    )?;
    // Node processes on this machine's cores, or other machines' (then the probe still
    // tells whether this one moved).
    let probe = crate::env::Probe::start(true);
    let hub = match &cc.hosts {
        Some(hosts) => dial_nodes(hosts)?,
        None => start_nodes(cfg.nodes, &cc.exe)?,
    };
    with_hub(hub, |hub| {
        coordinate_nodes::<W, P>(cfg, &w, cc, hub, wall, &sizing, &probe)
    })
}

/// Starts `nodes` node processes of `exe` and runs `body` with their hub ([`with_hub`]).
pub(crate) fn with_nodes<T>(
    nodes: u16,
    exe: &std::path::Path,
    body: impl FnOnce(&mut Hub) -> Result<T, ClusterError>,
) -> Result<T, ClusterError> {
    with_hub(start_nodes(nodes, exe)?, body)
}

/// Runs `body` with `hub`'s nodes, then ends them: reaped when `body` succeeded, told and
/// killed when it failed. No child outlives the call.
fn with_hub<T>(
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

fn coordinate_nodes<W: Workload, P: Protocol>(
    cfg: &RunConfig,
    w: &W,
    cc: &ClusterConfig,
    hub: &mut Hub,
    wall: Instant,
    sizing: &crate::sizing::Sizing,
    probe: &crate::env::Probe,
) -> Result<Report, ClusterError> {
    let run = Duration::from_secs_f64(cfg.warmup_s + cfg.duration_s);
    let joined_at = hub.run_nodes(&cc.bench_args, cc.transport, run)?;
    let load_s = joined_at.duration_since(wall).as_secs_f64();
    let finish = Instant::now() + Duration::from_secs(FINISH_S_MAX);
    let mut summaries: Vec<NodeSummary<W::Ledger>> = Vec::new();
    for (i, m) in hub.gather("summary", finish)?.into_iter().enumerate() {
        let Msg::Summary { summary } = m else {
            unreachable!("gather checked the name")
        };
        summaries.push(serde_json::from_value(summary).map_err(|e| {
            ClusterError::BadInput(format!("malformed summary from node {i}: {e}"))
        })?);
    }
    if let Some((node, txn)) = crate::driver::failed_after_log(&summaries) {
        // A process that died is named by the failure itself (no injected crashes here).
        return Err(RunError::NodeFailed {
            node,
            txn,
            crashed: Vec::new(),
        }
        .into());
    }
    let ledger = crate::driver::merge_ledgers(w, &summaries);
    hub.broadcast(&Msg::Ledger {
        ledger: json("the merged ledger", &ledger),
    })?;
    let mut checks: Vec<NodeChecks<W::NodeCheck>> = Vec::new();
    for (i, m) in hub.gather("checks", finish)?.into_iter().enumerate() {
        let Msg::Checks { checks: c } = m else {
            unreachable!("gather checked the name")
        };
        // A node holding no records has none to check.
        let c: Option<NodeChecks<W::NodeCheck>> = serde_json::from_value(c)
            .map_err(|e| ClusterError::BadInput(format!("malformed checks from node {i}: {e}")))?;
        checks.extend(c);
    }
    hub.broadcast(&Msg::Bye)?;
    let facts = RunFacts {
        warmup_end_ns: (cfg.warmup_s * 1e9) as u64,
        progress: Vec::new(),
        load_s,
        wall_s: wall.elapsed().as_secs_f64(),
        os_threads: cfg.nodes as usize * cfg.threads as usize,
        sim: None,
        log_ring_words: sizing.log_ring_words,
        memory_bytes: sizing.total_bytes(),
        coroutines_hung: 0,
        crashed: Vec::new(),
        rpcs_served_by_node: summaries
            .iter()
            .map(|s| s.rpcs_served)
            .collect::<Option<Vec<_>>>()
            .unwrap_or_default(),
    };
    let cpu = crate::env::CpuWindow::default();
    let mut report =
        crate::driver::report::<W, P>(cfg, w, facts, summaries, &ledger, checks, |committed| {
            probe.finish(&cpu, committed)
        });
    report.config.fabric = "ucx";
    report.ucx = Some(crate::report::UcxReport {
        transport: cc.transport.name().to_string(),
        processes: cfg.nodes,
        verbs: ucx::describe(cc.transport, cfg.coalesce)
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    });
    if let Some(path) = &cfg.history_file {
        let out = crate::history::HistoryWriter::create(path, cfg.protocol.isolation())
            .map_err(ClusterError::BadInput)?;
        let mut h = std::mem::take(&mut report.history);
        out.append(&mut h);
        let (passed, detail) = match out.finish() {
            Ok(n) => (
                true,
                format!("{n} attempts gathered from the nodes' summaries"),
            ),
            Err(e) => (false, e),
        };
        report.passed &= passed;
        report.checks.push(crate::report::CheckReport {
            name: "history.written".into(),
            passed,
            detail,
        });
    }
    Ok(report)
}
