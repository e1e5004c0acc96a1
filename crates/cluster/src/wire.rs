//! The coordinator-node wire: versioned, length-prefixed JSON messages over each node's TCP
//! connection, heartbeats, and the errors a cluster run ends with.

use crate::hosts::Host;
use atoll_fabric_ucx::{self as ucx, Transports};
use atoll_runner::config::ConfigError;
use atoll_runner::run::RunError;
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::TcpStream;
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
pub(crate) const AM_INBOX_MESSAGES_PER_COORDINATOR: usize = 64;
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
/// [`atoll_runner::sizing::OVERSUBSCRIPTION_MAX`] busy threads per core) waits for a core a few
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
    /// A node's worker closed a progress interval (sent as the run goes, before `summary`).
    Interval {
        interval: atoll_runner::stats::Interval,
    },
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
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Msg::Hello { .. } => "hello",
            Msg::Claim { .. } => "claim",
            Msg::Beat => "beat",
            Msg::Config { .. } => "config",
            Msg::Joined { .. } => "joined",
            Msg::Directory { .. } => "directory",
            Msg::Ready => "ready",
            Msg::Start => "start",
            Msg::Interval { .. } => "interval",
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
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// Bad input: flags, a malformed or mismatched message, UCX missing. Exit 2.
    #[error("{0}")]
    BadInput(String),
    /// A node failed (its process exited, its connection closed, it reported a failure),
    /// or the run did. Exit 1.
    #[error("{0}")]
    Failed(String),
}

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
pub(crate) enum ReadError {
    Closed,
    Malformed(String),
}

pub(crate) fn frame(m: &Msg) -> Vec<u8> {
    let body = serde_json::to_vec(m).expect("messages serialize");
    let mut frame = Vec::with_capacity(4 + body.len());
    frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
    frame.extend_from_slice(&body);
    frame
}

pub(crate) fn write_msg(s: &mut TcpStream, m: &Msg) -> std::io::Result<()> {
    s.write_all(&frame(m))
}

pub(crate) fn read_msg(s: &mut impl Read) -> Result<Msg, ReadError> {
    read_frame(s).and_then(|body| decode_msg(&body))
}

/// A message's bytes, its length checked.
pub(crate) fn read_frame(s: &mut impl Read) -> Result<Vec<u8>, ReadError> {
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

pub(crate) fn decode_msg(body: &[u8]) -> Result<Msg, ReadError> {
    serde_json::from_slice(body).map_err(|e| {
        let head = String::from_utf8_lossy(&body[..body.len().min(40)]).into_owned();
        ReadError::Malformed(format!("{head:?} is not a message: {e}"))
    })
}

/// Milliseconds since this process first asked: the clock of [`Conn::heard_ms`].
pub(crate) fn now_ms() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// A stream that stamps `heard_ms` whenever bytes arrive, so a large message in transit
/// counts as a sign of life as much as a beat does.
pub(crate) struct Stamped {
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
pub(crate) struct Conn {
    out: Arc<Mutex<TcpStream>>,
    heard_ms: Arc<AtomicU64>,
}

/// `Conn::heard_ms` before anything arrived on a connection watched from its first byte.
pub(crate) const UNHEARD_MS: u64 = u64::MAX;

impl Conn {
    /// Wraps a connected stream: writes time out once the other end stops reading for a
    /// heartbeat silence (it is hung); a thread reads its messages into `tx`, tagged `tag`.
    /// The other end's silence counts from now if `watch_now`, else from the first bytes
    /// it sends (a node's coordinator beats only once every node said hello; until then
    /// the start-up bound applies).
    pub(crate) fn open(
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

    pub(crate) fn send(&self, m: &Msg) -> std::io::Result<()> {
        // Encoded before the writer is taken: a large message (a summary carrying its
        // history) takes seconds to encode, and the heartbeat skips a busy writer.
        let f = frame(m);
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        out.write_all(&f)
    }

    /// How long the other end has been silent, if longer than a heartbeat silence.
    pub(crate) fn silent_for(&self) -> Option<Duration> {
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
pub(crate) fn heartbeat(conns: Vec<Conn>, stop: Arc<AtomicBool>) {
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
pub(crate) fn reader(
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
