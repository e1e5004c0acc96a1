//! Specifications of a node's defence against its wire: a one-node cluster (`run_node`, one
//! worker) receives forged active messages from a rogue UCX worker in this process, over tcp
//! and over shared memory. Each must stop the node's run with `NodeRunError::Malformed`
//! naming what was wrong, never a panic, and never reach the node's handler. Built without
//! UCX, each test prints that it was skipped.

#[macro_use]
mod common;

use atoll_fabric::core::{NodeSetup, ReplyTo};
use atoll_fabric::{Bytes, Handled, NodeId, NodeMemory, RpcHandler};
use atoll_fabric_ucx::{
    run_node, AmSendOptions, Bootstrap, Context, ContextConfig, NodeAddresses, NodeArena,
    NodeRunError, RunWatch, Transports, UcxConfig, UcxError, Worker, WorkerAddress, WorkerConfig,
    AM_INBOX_MESSAGES_DEFAULT,
};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Longest a run waits for the node to refuse the forged message.
const WAIT_S_MAX: u64 = 20;
/// The node's active message ids (the wire's, not exported: a forger writes raw bytes).
const AM_REQUEST: u16 = 1;
const AM_REPLY: u16 = 2;
const AM_BATCH: u16 = 5;

/// A handler the forged messages must never reach.
struct Untouchable;

impl RpcHandler for Untouchable {
    fn handle(&self, _: NodeId, _: ReplyTo, _: &[u8], _: &mut Bytes) -> Handled {
        panic!("a forged message reached the handler");
    }
}

/// Hands the node's worker address to the forger, then waits for the node's workers to
/// stop on their own (the refusal), at most `WAIT_S_MAX`.
struct Forged {
    address: mpsc::Sender<Vec<u8>>,
}

impl Bootstrap for Forged {
    fn exchange(&mut self, mine: NodeAddresses) -> Result<Vec<NodeAddresses>, String> {
        self.address
            .send(mine.workers[0].clone())
            .map_err(|e| e.to_string())?;
        Ok(vec![mine])
    }

    fn start(&mut self) -> Result<(), String> {
        Ok(())
    }

    fn wait_stop(&mut self, watch: &RunWatch<'_>) -> Result<(), String> {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(WAIT_S_MAX) {
            if let Some(why) = watch.failure() {
                return Err(why);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        Ok(())
    }
}

/// Runs node 0 of a one-node cluster while a rogue worker sends it message `id` with
/// `header` and `data`; returns how the run ended, or `None` without UCX.
fn forge(t: Transports, id: u16, header: Vec<u8>, data: Vec<u8>) -> Option<NodeRunError> {
    let cfg = UcxConfig {
        transports: t,
        settings: Vec::new(),
        nodes: 1,
        threads_per_node: 1,
        op_timeout_ns: 5_000_000_000,
        am_inbox_messages_max: AM_INBOX_MESSAGES_DEFAULT,
        coalesce: true,
        pin_cpus: Vec::new(),
    };
    let memory = Arc::new(NodeMemory::new(NodeId(0), &[64]));
    let arena = match NodeArena::register(&cfg, &memory) {
        Ok(a) => a,
        Err(UcxError::NotBuilt) => {
            println!("skipped: {}", UcxError::NotBuilt);
            return None;
        }
        Err(e) => panic!("registering the node's memory: {e}"),
    };
    let setup = NodeSetup {
        memory,
        handler: Arc::new(Untouchable),
    };
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let done = AtomicBool::new(false);
    let (ran, forger) = std::thread::scope(|s| {
        let done = &done;
        let forger = s.spawn(move || -> Result<(), UcxError> {
            let Ok(address) = rx.recv() else {
                return Ok(());
            };
            let context = Context::new(&ContextConfig::new(t))?;
            let worker = Worker::new(&context, &WorkerConfig::default())?;
            let ep = worker.connect(&WorkerAddress::from_bytes(&address)?)?;
            ep.am_send(id, header, data, AmSendOptions::default(), 1)?;
            // Progress until the node is done with it: the send needs this worker's turns.
            while !done.load(Ordering::Acquire) {
                worker.progress();
                std::thread::yield_now();
            }
            Ok(())
        });
        let ran = run_node(&cfg, arena, &setup, &mut Forged { address: tx }, &|_| {
            Vec::new()
        });
        done.store(true, Ordering::Release);
        (ran, forger.join().expect("the forger does not panic"))
    });
    match (ran, forger) {
        (Err(NodeRunError::Ucx(UcxError::NotBuilt)), _) => {
            println!("skipped: {}", UcxError::NotBuilt);
            None
        }
        (_, Err(e)) => panic!("the forger failed: {e}"),
        (Ok(_), Ok(())) => panic!("the node ran on after a forged message"),
        (Err(e), Ok(())) => Some(e),
    }
}

/// A request header: requester's worker, slot, op index, token, target node.
fn request_header(worker: u32, target: u16) -> Vec<u8> {
    let mut h = Vec::new();
    h.extend_from_slice(&worker.to_le_bytes());
    h.extend_from_slice(&3u32.to_le_bytes());
    h.extend_from_slice(&0u32.to_le_bytes());
    h.extend_from_slice(&9u64.to_le_bytes());
    h.extend_from_slice(&target.to_le_bytes());
    h
}

/// Asserts the run ended as a refused message whose description holds `what`.
fn refused(e: Option<NodeRunError>, what: &str) {
    match e {
        None => {}
        Some(NodeRunError::Malformed(m)) => {
            assert!(m.contains(what), "expected '{what}' in: {m}");
            assert!(m.contains("node 0"), "the message names the node: {m}");
            assert!(!m.contains('\n'), "one line: {m}");
        }
        Some(e) => panic!("expected a refused message, got: {e}"),
    }
}

fn wire_a_request_for_another_node_stops_the_run_as_malformed(t: Transports) {
    refused(
        forge(t, AM_REQUEST, request_header(0, 5), b"payload".to_vec()),
        "a request for node 5 arrived at node 0",
    );
}

fn wire_a_request_from_a_worker_outside_the_cluster_is_refused(t: Transports) {
    refused(
        forge(t, AM_REQUEST, request_header(99, 0), Vec::new()),
        "from worker 99",
    );
}

fn wire_a_reply_to_no_held_request_is_refused(t: Transports) {
    // Slot, op index, token 0: as another worker of the node answering a held request.
    let mut h = Vec::new();
    h.extend_from_slice(&4u32.to_le_bytes());
    h.extend_from_slice(&1u32.to_le_bytes());
    h.extend_from_slice(&0u64.to_le_bytes());
    refused(forge(t, AM_REPLY, h, Vec::new()), "holds no request for");
}

fn wire_a_message_with_a_header_of_the_wrong_length_is_refused(t: Transports) {
    refused(
        forge(t, AM_REPLY, vec![1, 2, 3], Vec::new()),
        "id 2 and a 3-byte header is none of ours",
    );
}

fn wire_a_batch_whose_frames_overrun_it_is_refused(t: Transports) {
    refused(
        forge(t, AM_BATCH, 1000u32.to_le_bytes().to_vec(), vec![0; 16]),
        "a batch of 1000 frames in 16 bytes",
    );
}

over_tcp_and_shm!(
    wire_a_request_for_another_node_stops_the_run_as_malformed,
    wire_a_request_from_a_worker_outside_the_cluster_is_refused,
    wire_a_reply_to_no_held_request_is_refused,
    wire_a_message_with_a_header_of_the_wrong_length_is_refused,
    wire_a_batch_whose_frames_overrun_it_is_refused,
);
