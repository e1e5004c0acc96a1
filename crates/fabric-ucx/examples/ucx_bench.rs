//! Microbenchmark of the UCX layer: latency (median and p99, one op outstanding) and rate
//! (16 outstanding) of an active-message round trip, put, put + flush, get, CAS and
//! fetch-add, over TCP and over shared memory, printed as a table.
//!
//! Both workers live in this process and ONE thread drives them (the client's progress, then
//! the server's, which answers requests from its inbox at once), so the figures include the
//! server's turn of the loop but no second core: on the two-core machine the other core
//! stays free. Run:
//!
//! ```sh
//! cargo run --release -p atoll-fabric-ucx --example ucx_bench -- [--ops N] [--seconds S] [--transports tcp,shm]
//! ```

use atoll_fabric_ucx::{
    AmSendOptions, Context, ContextConfig, Endpoint, MemRegion, Outcome, RegionDescriptor,
    RemoteRegion, Transports, UcxError, Worker, WorkerConfig,
};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant};

const REQUEST_ID: u16 = 1;
const REPLY_ID: u16 = 2;
/// Ops kept in flight for the rate figures.
const OUTSTANDING: usize = 16;
/// Words the server registers.
const REGION_WORDS: usize = 1024;
/// Bytes of an active message's request and reply data (an RPC's small request).
const AM_BYTES: usize = 16;
/// Longest one op may take before the run stops with an error.
const OP_WAIT_S_MAX: u64 = 10;

struct Words(Box<[AtomicU64]>);

impl AsRef<[AtomicU64]> for Words {
    fn as_ref(&self) -> &[AtomicU64] {
        &self.0
    }
}

/// What the benchmark measures.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Request with a reply endpoint, answered by the server's loop; done when the reply
    /// arrives.
    AmRoundTrip,
    /// One word; done at local completion (the data may still be on its way).
    Put,
    /// One word, then an endpoint flush; done when the flush completes (at the target).
    PutFlush,
    Get {
        words: u64,
    },
    Cas,
    FetchAdd,
}

impl Kind {
    fn name(self) -> String {
        match self {
            Kind::AmRoundTrip => format!("am round trip ({AM_BYTES} B)"),
            Kind::Put => "put 8 B (local completion)".into(),
            Kind::PutFlush => "put 8 B + flush".into(),
            Kind::Get { words } => format!("get {} B", words * 8),
            Kind::Cas => "cas 64".into(),
            Kind::FetchAdd => "fetch-add 64".into(),
        }
    }
}

struct Bench {
    client: Worker,
    server: Worker,
    to_server: Endpoint,
    region: RemoteRegion,
    _server_region: MemRegion,
    _contexts: [Context; 2],
    next_token: u64,
}

impl Bench {
    fn new(transports: Transports) -> Result<Bench, UcxError> {
        let ca = Context::new(&ContextConfig::new(transports))?;
        let cb = Context::new(&ContextConfig::new(transports))?;
        let client = Worker::new(&ca, &WorkerConfig::default())?;
        let server = Worker::new(&cb, &WorkerConfig::default())?;
        client.receive_am(REPLY_ID)?;
        server.receive_am(REQUEST_ID)?;
        let words = Words((0..REGION_WORDS).map(|_| AtomicU64::new(0)).collect());
        let server_region = MemRegion::map(&cb, Arc::new(words))?;
        let to_server = client.connect(&server.address()?)?;
        let wire = server_region.descriptor()?.to_bytes();
        let region = to_server.attach(&RegionDescriptor::from_bytes(&wire)?)?;
        Ok(Bench {
            client,
            server,
            to_server,
            region,
            _server_region: server_region,
            _contexts: [ca, cb],
            next_token: 1,
        })
    }

    /// Posts one op; returns the token whose completion (or reply) ends it.
    fn post(&mut self, kind: Kind) -> Result<u64, UcxError> {
        let token = self.next_token;
        self.next_token += 1;
        let slot = token % 512;
        match kind {
            Kind::AmRoundTrip => {
                let options = AmSendOptions {
                    reply_ep: true,
                    ..AmSendOptions::default()
                };
                let header = token.to_le_bytes().to_vec();
                self.to_server
                    .am_send(REQUEST_ID, header, vec![7; AM_BYTES], options, 0)?
            }
            Kind::Put => self.region.put(slot, vec![token], token)?,
            Kind::PutFlush => {
                self.region.put(slot, vec![token], 0)?;
                self.to_server.flush(token)?
            }
            Kind::Get { words } => self.region.get(slot, words, token)?,
            Kind::Cas => self.region.atomic_cswap64(slot, token - 1, token, token)?,
            Kind::FetchAdd => self.region.atomic_fetch_add64(slot, 1, token)?,
        }
        Ok(token)
    }

    /// One turn of the loop: both workers progress, the server answers its requests, and
    /// every finished token (completions with a nonzero token, and replies) goes to `done`.
    fn turn(&mut self, done: &mut impl FnMut(u64)) -> Result<(), UcxError> {
        self.client.progress();
        self.server.progress();
        while let Some(request) = self.server.take_am() {
            if let Some(reply) = &request.reply {
                self.server
                    .am_reply(reply, REPLY_ID, request.header.clone(), request.data, 0)?;
            }
        }
        self.server.poll_completions(|_| {});
        let mut failure = None;
        self.client.poll_completions(|c| match c.result {
            Ok(Outcome::Done | Outcome::Words(_) | Outcome::Old(_)) if c.token != 0 => {
                done(c.token)
            }
            Ok(_) => {}
            Err(e) => failure = Some(e),
        });
        if let Some(e) = failure {
            return Err(e);
        }
        while let Some(reply) = self.client.take_am() {
            let mut t = [0u8; 8];
            if reply.header.len() == 8 {
                t.copy_from_slice(&reply.header);
                done(u64::from_le_bytes(t));
            }
        }
        Ok(())
    }

    /// Latencies in ns of `ops` ops one at a time, stopping early after `budget`.
    fn latency(&mut self, kind: Kind, ops: usize, budget: Duration) -> Result<Vec<u64>, UcxError> {
        let mut out = Vec::with_capacity(ops);
        let run = Instant::now();
        while out.len() < ops && (run.elapsed() < budget || out.len() < 10) {
            let start = Instant::now();
            let token = self.post(kind)?;
            let mut finished = false;
            while !finished {
                self.turn(&mut |t| finished |= t == token)?;
                if start.elapsed() > Duration::from_secs(OP_WAIT_S_MAX) {
                    return Err(UcxError::TimedOut {
                        op: "bench op",
                        waited_ms: OP_WAIT_S_MAX * 1000,
                    });
                }
            }
            out.push(start.elapsed().as_nanos() as u64);
        }
        Ok(out)
    }

    /// Ops per second with `OUTSTANDING` in flight, over at most `ops` ops or `budget`.
    fn rate(&mut self, kind: Kind, ops: usize, budget: Duration) -> Result<f64, UcxError> {
        let start = Instant::now();
        let mut in_flight = 0usize;
        let mut completed = 0usize;
        let mut last = Instant::now();
        while completed < ops && (start.elapsed() < budget || completed < 10) {
            while in_flight < OUTSTANDING {
                self.post(kind)?;
                in_flight += 1;
            }
            let mut n = 0;
            self.turn(&mut |_| n += 1)?;
            if n > 0 {
                last = Instant::now();
            } else if last.elapsed() > Duration::from_secs(OP_WAIT_S_MAX) {
                return Err(UcxError::TimedOut {
                    op: "bench rate",
                    waited_ms: OP_WAIT_S_MAX * 1000,
                });
            }
            in_flight -= n;
            completed += n;
        }
        let elapsed = start.elapsed().as_secs_f64();
        // Drain what is still in flight so the next measurement starts clean.
        while in_flight > 0 {
            let mut n = 0;
            self.turn(&mut |_| n += 1)?;
            in_flight -= n.min(in_flight);
            if last.elapsed() > Duration::from_secs(OP_WAIT_S_MAX) {
                break;
            }
        }
        Ok(completed as f64 / elapsed)
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)] as f64 / 1000.0
}

struct Args {
    ops: usize,
    seconds: f64,
    transports: Vec<Transports>,
}

/// A flag this benchmark does not take, or a bad value for one.
#[derive(Debug, thiserror::Error)]
enum ArgsError {
    #[error("{0} needs a value")]
    NoValue(String),
    #[error("--ops {0}: a positive integer")]
    Ops(String),
    #[error("--seconds {0}: a number in (0, 600]")]
    Seconds(String),
    #[error("--transports: {0:?} is not tcp or shm")]
    Transport(String),
    #[error("unknown flag {0} (--ops, --seconds, --transports)")]
    UnknownFlag(String),
}

fn parse_args() -> Result<Args, ArgsError> {
    let mut args = Args {
        ops: 20_000,
        seconds: 1.0,
        transports: vec![Transports::Tcp, Transports::SharedMemory],
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or_else(|| ArgsError::NoValue(flag.clone()))?;
        match flag.as_str() {
            "--ops" => {
                args.ops = value
                    .parse()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| ArgsError::Ops(value.clone()))?
            }
            "--seconds" => {
                args.seconds = value
                    .parse()
                    .ok()
                    .filter(|s: &f64| *s > 0.0 && *s <= 600.0)
                    .ok_or_else(|| ArgsError::Seconds(value.clone()))?
            }
            "--transports" => {
                args.transports = value
                    .split(',')
                    .map(|t| match t {
                        "tcp" => Ok(Transports::Tcp),
                        "shm" => Ok(Transports::SharedMemory),
                        other => Err(ArgsError::Transport(other.to_string())),
                    })
                    .collect::<Result<_, _>>()?
            }
            other => return Err(ArgsError::UnknownFlag(other.to_string())),
        }
    }
    Ok(args)
}

fn main() {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    match Context::ucx_version() {
        Ok(v) => println!(
            "UCX {v}; one thread drives client and server; {OUTSTANDING} outstanding for rates"
        ),
        Err(e) => {
            println!("skipped: {e}");
            return;
        }
    }
    let budget = Duration::from_secs_f64(args.seconds);
    println!(
        "{:<5} {:<28} {:>8} {:>11} {:>11} {:>14}",
        "tls", "op", "samples", "median µs", "p99 µs", "rate kops/s"
    );
    let kinds = [
        Kind::AmRoundTrip,
        Kind::Put,
        Kind::PutFlush,
        Kind::Get { words: 1 },
        Kind::Get { words: 16 },
        Kind::Cas,
        Kind::FetchAdd,
    ];
    for t in &args.transports {
        let mut bench = match Bench::new(*t) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("error: {} setup: {e}", t.name());
                std::process::exit(1);
            }
        };
        for kind in kinds {
            let measured = bench.latency(kind, args.ops, budget).and_then(|mut lat| {
                lat.sort_unstable();
                let rate = bench.rate(kind, args.ops, budget)?;
                Ok((lat, rate))
            });
            match measured {
                Ok((lat, rate)) => println!(
                    "{:<5} {:<28} {:>8} {:>11.2} {:>11.2} {:>14.1}",
                    t.name(),
                    kind.name(),
                    lat.len(),
                    percentile(&lat, 0.5),
                    percentile(&lat, 0.99),
                    rate / 1000.0
                ),
                Err(e) => println!("{:<5} {:<28} error: {e}", t.name(), kind.name()),
            }
        }
    }
}
