//! The simulator's network and CPU model, and the named profiles of the papers' clusters.
//!
//! A message from node A to node B posted at virtual time t:
//! 1. waits for A's NIC send queue, which serves one message per
//!    `max(1 / msg_rate, wire bytes / bandwidth)`;
//! 2. crosses the wire in half the verb class's round trip, plus any latency spike on the
//!    link, plus a queue-pair cache miss when A talks to more peers than its NIC caches;
//! 3. waits for B's NIC receive queue (same service time);
//! 4. is never delivered before an earlier message of the same link (RC queue pairs are
//!    reliable and ordered).
//!
//! A one-sided op executes at B when it leaves B's receive queue, and its reply makes the
//! same trip back. An RPC request is handed to B's worker, whose simulated core serves it
//! between co-routines at `rpc_handler_ns` (+ per byte) of CPU time.

use atoll_fabric::verbs::VerbKind;

/// Parameters of the network, per node's NIC.
#[derive(Clone, Debug, PartialEq)]
pub struct NetProfile {
    pub name: &'static str,
    /// What the numbers come from.
    pub source: &'static str,
    /// Round trip of a small op, NIC to NIC and back, per verb class
    /// (READ, WRITE, CAS, FETCH_ADD, RPC), excluding queueing and CPU time.
    pub rtt_ns: [u64; VerbKind::COUNT],
    /// Link bandwidth, bytes per second.
    pub bandwidth_bytes_per_s: f64,
    /// Messages per second a NIC can send (and, separately, receive).
    pub nic_msgs_per_s: f64,
    /// Headers added to every message on the wire.
    pub wire_header_bytes: u64,
    /// Peers (connections) a NIC keeps in its cache; beyond this, ops pay `qp_miss_ns`
    /// in proportion to the peers that do not fit (RCC §6.6, NAM-DB's QP figure).
    pub qp_cache_peers: u32,
    pub qp_miss_ns: u64,
    /// Whether one-sided verbs exist; without them (TCP) each one-sided op is emulated by
    /// the target's CPU like a small RPC.
    pub one_sided_in_nic: bool,
    /// NIC time of one atomic (CAS, FETCH_ADD) on a word: a NIC serializes the atomics to
    /// one address (each is a read-modify-write of host memory across PCIe), so one word
    /// serves at most `1e9 / atomic_word_ns` atomics per second however many clients post
    /// them: what makes a global FETCH_ADD counter plateau (NAM-DB §4, the timestamp
    /// oracle). Atomics to different words do not wait for each other. 0: not modelled.
    pub atomic_word_ns: u64,
    /// CPU time of one message at each end beyond posting and handling it: the kernel's
    /// send and receive paths of a socket (system calls, copies, wake-ups). 0 where the
    /// NIC or shared memory moves the message without the kernel.
    pub msg_cpu_ns: u64,
}

/// CPU costs charged to a worker's simulated core.
///
/// The fabric charges `switch_ns`, `post_ns`, `local_op_ns` and the RPC handler's cost as
/// the ops happen; the coordinator's own work (transaction logic, read/write-set and stage
/// bookkeeping) is `txn_ns` per attempt plus `txn_ns_per_access` per record it touched,
/// which the bench's coordinator loop charges through `Endpoint::compute` (the simulator
/// cannot see where a transaction begins).
#[derive(Clone, Debug, PartialEq)]
pub struct CpuProfile {
    /// The profile's name (`xeon`, `calibrated`), with `*F` when scaled by F.
    pub name: String,
    /// Switching to a co-routine (each poll).
    pub switch_ns: u64,
    /// Posting one work request and polling its completion (building it, a share of the
    /// doorbell MMIO, the completion's bookkeeping).
    pub post_ns: u64,
    /// One direct access to the node's own memory (a cache miss or two).
    pub local_op_ns: u64,
    /// Serving one RPC request (dispatch and handler), plus per request and reply byte; a
    /// node's own requests pay it too ([`CpuProfile::handler_ns`]).
    pub rpc_handler_ns: u64,
    pub rpc_handler_ns_per_byte: f64,
    /// The coordinator's CPU per transaction attempt outside verbs: generating and running
    /// the transaction's logic, beginning and ending it, its stages' bookkeeping.
    pub txn_ns: u64,
    /// The coordinator's CPU per record an attempt touched, outside verbs: its read/write
    /// set entry, copies into and out of it, its share of each stage's bookkeeping.
    pub txn_ns_per_access: u64,
}

/// An instance's own log as the simulator prices it: the `write` that carries a group's
/// records into a file in memory, and the device's time to make it durable. Measured here
/// (2026-11-30, 2 vCPUs, idle): a `write` of 64 B into /dev/shm takes 0.7 µs, of 4 KiB 2.3 µs;
/// `fdatasync` is free on tmpfs and 75 µs on this machine's disk. The paper's instances log to
/// memory-mapped files (sync 0).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogDevice {
    /// A write's fixed CPU (the system call, the page cache's bookkeeping).
    pub write_base_ns: u64,
    /// A write's CPU per KiB carried.
    pub write_ns_per_kib: u64,
    /// After the write, until the record is durable (a sync), on no core's CPU.
    pub sync_ns: u64,
}

/// The measured write: 0.7 µs for 64 B, 2.3 µs for 4 KiB (see [`LogDevice`]).
pub const LOG_WRITE_BASE_NS: u64 = 680;
pub const LOG_WRITE_NS_PER_KIB: u64 = 400;

impl LogDevice {
    /// A file in memory (tmpfs, or the paper's memory-mapped log), as measured here, with
    /// `sync_ns` for its device.
    pub fn measured(sync_ns: u64) -> Self {
        LogDevice {
            write_base_ns: LOG_WRITE_BASE_NS,
            write_ns_per_kib: LOG_WRITE_NS_PER_KIB,
            sync_ns,
        }
    }

    /// The CPU of one write carrying `bytes`.
    pub fn write_ns(&self, bytes: u64) -> u64 {
        self.write_base_ns + bytes * self.write_ns_per_kib / 1024
    }
}

/// The CPU profiles `cpu_profile` accepts by name; the first is the default.
pub const CPU_PROFILES: [&str; 2] = ["calibrated", "xeon"];

/// Largest `--cpu-scale` accepted: a CPU a hundred times slower than the papers' is far
/// outside anything the profiles model.
pub const CPU_SCALE_MAX: f64 = 100.0;

impl CpuProfile {
    /// Our first estimate for the papers' Xeon E5 v3 cores, before anything was measured:
    /// co-routine switches of tens of nanoseconds (RCC §6.3 notes their cost), a few hundred
    /// nanoseconds to post a verb (the MMIO doorbell, Kalia et al. ATC'16), and about half a
    /// microsecond to serve a small RPC (FaSST, OSDI'16, reports a few million RPCs per
    /// second per core). It charges nothing for the coordinator's own work, which is why it
    /// runs optimistic (issue 9; docs/simulator.md).
    pub fn xeon() -> Self {
        CpuProfile {
            name: "xeon".into(),
            switch_ns: 50,
            post_ns: 100,
            local_op_ns: 100,
            rpc_handler_ns: 500,
            rpc_handler_ns_per_byte: 0.05,
            txn_ns: 0,
            txn_ns_per_access: 0,
        }
    }

    /// Measured on Atoll's own code by `atoll calibrate` (2026-11-23 19:08, build 28fcfe3, on a 2-core AMD EPYC family 25 model 17 KVM guest, medians of 5
    /// repetitions; docs/simulator.md has the table), then multiplied by
    /// [`CALIBRATION_SCALE`] to stand for the papers' Xeon E5-2670 v3 (RCC) / E5-2650 v4
    /// (DrTM+H) cores.
    pub fn calibrated() -> Self {
        let s = |ns: f64| (ns * CALIBRATION_SCALE).round() as u64;
        CpuProfile {
            name: "calibrated".into(),
            switch_ns: s(MEASURED_SWITCH_NS),
            post_ns: s(MEASURED_POST_NS),
            local_op_ns: s(MEASURED_LOCAL_OP_NS),
            rpc_handler_ns: s(MEASURED_RPC_HANDLER_NS),
            rpc_handler_ns_per_byte: MEASURED_RPC_HANDLER_NS_PER_BYTE * CALIBRATION_SCALE,
            txn_ns: s(MEASURED_TXN_NS),
            txn_ns_per_access: s(MEASURED_TXN_NS_PER_ACCESS),
        }
    }

    /// CPU time of serving one RPC of `bytes` (request and reply together): the same
    /// whether the request came over the network or from a co-routine of the node itself
    /// (the same handler decodes, dispatches and runs it). Bytes stand for the records a
    /// request carries, which the fabric cannot see: every record adds an item to the
    /// request and, for a READ, its data to the reply.
    pub fn handler_ns(&self, bytes: u64) -> u64 {
        self.rpc_handler_ns + (bytes as f64 * self.rpc_handler_ns_per_byte) as u64
    }

    /// Every cost multiplied by `factor` (a slower or faster CPU than the profile's).
    pub fn scaled(&self, factor: f64) -> Self {
        let s = |ns: u64| (ns as f64 * factor).round() as u64;
        CpuProfile {
            name: if factor == 1.0 {
                self.name.clone()
            } else {
                format!("{}*{factor}", self.name)
            },
            switch_ns: s(self.switch_ns),
            post_ns: s(self.post_ns),
            local_op_ns: s(self.local_op_ns),
            rpc_handler_ns: s(self.rpc_handler_ns),
            rpc_handler_ns_per_byte: self.rpc_handler_ns_per_byte * factor,
            txn_ns: s(self.txn_ns),
            txn_ns_per_access: s(self.txn_ns_per_access),
        }
    }
}

// What `atoll calibrate --json calib.json` (defaults: 5 repetitions, 200,000 ops, 1 s per
// transaction run) measured on 2026-11-23 19:08 UTC on this machine, in ns, the medians of
// its repetitions, on the engine with issue 9's lean local path (build 28fcfe3) and a quiet
// machine (load 0.9). The first calibration (17:09, pre-lean engine c2a682b, load 5.4) had
// post 159.7, switch 37.8, local 132.3, handler 485.9, txn 1219.4, per access 269.0. See
// [`CpuProfile::calibrated`] and docs/simulator.md, "Calibration".

/// Posting and polling one one-sided verb to another node, less the access itself (8 per
/// doorbell).
pub const MEASURED_POST_NS: f64 = 206.1;
/// One co-routine switch (an executor turn: event loop, then the co-routine's poll).
pub const MEASURED_SWITCH_NS: f64 = 38.4;
/// One own-node access (a READ of a random record of a table larger than the caches, 8 per
/// doorbell).
pub const MEASURED_LOCAL_OP_NS: f64 = 91.1;
/// Serving one small RPC (a one-record READ request): decoding, dispatch, handler.
pub const MEASURED_RPC_HANDLER_NS: f64 = 473.5;
/// Serving an RPC, per byte of request and reply beyond the one-record READ's: 8-record
/// against one-record READ requests of 64-byte records (~410 ns per further record).
/// Measured on 2026-11-24 00:10 UTC (build caeaf76-dirty, load ~5: thread CPU time, the
/// medians of 5 repetitions; 2.6 and 3.0 in two runs with reply bytes only).
pub const MEASURED_RPC_HANDLER_NS_PER_BYTE: f64 = 2.6;
/// The coordinator's CPU per attempt outside verbs (YCSB fit's intercept).
pub const MEASURED_TXN_NS: f64 = 729.0;
/// The coordinator's CPU per record touched outside verbs (YCSB fit's slope).
pub const MEASURED_TXN_NS_PER_ACCESS: f64 = 209.9;

/// ns on the papers' CPUs per ns on the calibration machine: the ratio of base clocks,
/// 2.596 GHz here (the KVM guest's TSC, `lscpu` BogoMIPS / 2) over 2.3 GHz (Xeon E5-2670
/// v3, RCC §6.1's CPU; DrTM+H's E5-2650 v4 is 2.2 GHz). Instructions per clock are taken as
/// equal, which flatters the papers' older cores (Haswell/Broadwell against this Zen-family
/// core): if anything the calibrated profile is still optimistic.
pub const CALIBRATION_SCALE: f64 = 2.596 / 2.3;

/// A CPU or network profile that is not one of the named ones, or a bad CPU scale.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ProfileError {
    #[error("cpu-scale={0} is out of range: expected a factor in (0, {CPU_SCALE_MAX}]")]
    CpuScale(f64),
    #[error("unknown CPU profile '{0}': accepted are {accepted}{hint}", accepted = CPU_PROFILES.join(", "), hint = atoll_fabric::names::did_you_mean(.0, CPU_PROFILES.iter().copied()))]
    UnknownCpu(String),
    #[error("unknown network profile '{name}': accepted are {accepted}")]
    UnknownNet { name: String, accepted: String },
    #[error("unknown channel '{name}': accepted are {accepted}")]
    UnknownChannel { name: String, accepted: String },
}

/// The CPU profile named `name` (see [`CPU_PROFILES`]) times `scale`, or why not.
pub fn cpu_profile(name: &str, scale: f64) -> Result<CpuProfile, ProfileError> {
    if !scale.is_finite() || scale <= 0.0 || scale > CPU_SCALE_MAX {
        return Err(ProfileError::CpuScale(scale));
    }
    let p = match name {
        "calibrated" => CpuProfile::calibrated(),
        "xeon" => CpuProfile::xeon(),
        other => return Err(ProfileError::UnknownCpu(other.to_string())),
    };
    Ok(p.scaled(scale))
}

const GB: f64 = 1e9;

/// NIC time of one atomic on a contended word, for the ConnectX generation of the papers'
/// clusters: our estimate of ~2.5 M atomics per second on one address (one PCIe
/// read-modify-write of host memory, ~0.4 us, which the NIC does not overlap for the
/// same address), not a measured figure.
pub const ATOMIC_WORD_NS_CONNECTX: u64 = 400;

/// The named network profiles.
pub fn profiles() -> Vec<NetProfile> {
    // Kernel TCP over 10 GbE, with and without its CPU per message charged.
    let ten_gbe = NetProfile {
            name: "10gbe-tcp",
            source: "10 Gb Ethernet with kernel TCP, the baseline of the hardware-islands paper and Tell §6.6. \
                     A ~30 us small-message round trip and ~1 M msgs/s per node are our estimates; one-sided \
                     verbs are emulated in software on the target CPU",
            rtt_ns: [30_000; VerbKind::COUNT],
            bandwidth_bytes_per_s: 1.25 * GB,
            nic_msgs_per_s: 1e6,
            wire_header_bytes: 66,
            qp_cache_peers: u32::MAX,
            qp_miss_ns: 0,
            one_sided_in_nic: false,
            // Emulated by the target's CPU, which serves them one at a time anyway.
            atomic_word_ns: 0,
            msg_cpu_ns: 0,
        };
    vec![
        NetProfile {
            name: "edr-ib",
            source: "RCC's cluster: ConnectX-4 EDR 100 Gb/s InfiniBand (RCC §6.1). Small-op round trips \
                     of about 2 us, atomics slower, ~75 M msgs/s per port: our estimates from FaSST (OSDI'16) \
                     and Kalia et al. (ATC'16) for ConnectX-4",
            rtt_ns: [1_800, 1_800, 2_200, 2_200, 2_000],
            bandwidth_bytes_per_s: 12.5 * GB,
            nic_msgs_per_s: 75e6,
            wire_header_bytes: 32,
            qp_cache_peers: 400,
            qp_miss_ns: 500,
            one_sided_in_nic: true,
            atomic_word_ns: ATOMIC_WORD_NS_CONNECTX,
            msg_cpu_ns: 0,
        },
        NetProfile {
            name: "fdr-ib",
            source: "NAM-DB's cluster: InfiniBand FDR 4x, Mellanox Connect-IB, 54.54 Gb/s (NAM-DB slides; \
                     13.8 GB/s for a dual-port RNIC in the RSI paper). Round trips and the ~35 M msgs/s rate \
                     are our estimates from Kalia et al. (ATC'16) for ConnectX-3",
            rtt_ns: [2_000, 2_000, 2_600, 2_600, 2_400],
            bandwidth_bytes_per_s: 6.8 * GB,
            nic_msgs_per_s: 35e6,
            wire_header_bytes: 32,
            qp_cache_peers: 256,
            qp_miss_ns: 700,
            one_sided_in_nic: true,
            atomic_word_ns: ATOMIC_WORD_NS_CONNECTX,
            msg_cpu_ns: 0,
        },
        NetProfile {
            name: "qdr-ib",
            source: "Tell's cluster: 40 Gbit QDR InfiniBand (Tell §6; 32 Gb/s of data). RDMA 'within a few \
                     microseconds' (Tell §1); round trips and rates are our estimates",
            rtt_ns: [3_000, 3_000, 3_600, 3_600, 3_400],
            bandwidth_bytes_per_s: 4.0 * GB,
            nic_msgs_per_s: 20e6,
            wire_header_bytes: 32,
            qp_cache_peers: 128,
            qp_miss_ns: 1_000,
            one_sided_in_nic: true,
            atomic_word_ns: ATOMIC_WORD_NS_CONNECTX,
            msg_cpu_ns: 0,
        },
        ten_gbe.clone(),
        NetProfile {
            name: "10gbe-kernel",
            source: "10 Gb Ethernet with kernel TCP whose send and receive CPU is charged: \
                     10gbe-tcp's ~30 us round trip on the wire and NICs, plus the kernel's CPU per \
                     message end measured here over loopback (MEASURED_TCP_LOCAL_MSG_CPU_NS) on \
                     both cores, as the channel tcp-local charges it within a machine (the \
                     hardware-islands experiments' cluster network)",
            msg_cpu_ns: MEASURED_TCP_LOCAL_MSG_CPU_NS,
            ..ten_gbe
        },
        NetProfile {
            name: "ipoib",
            source: "IP over InfiniBand, the RSI paper's slower TCP baseline (IPoIB 22,000 vs IPoEth 32,000 \
                     tx/s: worse for small messages). A ~25 us round trip, ~3 GB/s and ~0.7 M msgs/s are our \
                     estimates",
            rtt_ns: [25_000; VerbKind::COUNT],
            bandwidth_bytes_per_s: 3.0 * GB,
            nic_msgs_per_s: 0.7e6,
            wire_header_bytes: 66,
            qp_cache_peers: u32::MAX,
            qp_miss_ns: 0,
            one_sided_in_nic: false,
            // Emulated by the target's CPU, which serves them one at a time anyway.
            atomic_word_ns: 0,
            msg_cpu_ns: 0,
        },
    ]
}

/// The channels between instances of one machine, measured on this machine on 2026-11-30
/// (docs/simulator.md, "Islands"): a 64-byte ping-pong between two processes pinned to the
/// two cores, 200,000 round trips, the median of 3 runs on an idle machine. TCP (loopback,
/// TCP_NODELAY): 30.3 us a round trip, 11.6 us of the client's CPU per round trip (a send
/// and a receive); UNIX stream sockets: 20.7 us and 7.3 us; a shared cache line: 0.25 us.
/// A message's CPU at each end is half the client's per round trip; the rest of the round
/// trip (less the four ends' CPU, which the simulator charges to the cores) is the latency.
pub const MEASURED_SHM_RTT_NS: u64 = 250;
pub const MEASURED_TCP_LOCAL_MSG_CPU_NS: u64 = 5_800;
pub const MEASURED_TCP_LOCAL_RTT_NS: u64 = 30_300 - 4 * MEASURED_TCP_LOCAL_MSG_CPU_NS;
pub const MEASURED_UNIX_MSG_CPU_NS: u64 = 3_650;
pub const MEASURED_UNIX_RTT_NS: u64 = 20_700 - 4 * MEASURED_UNIX_MSG_CPU_NS;

/// The channels between instances of one machine (`--channel`), the hardware-islands
/// paper's three [H§3, §5.2]: shared memory ("to emulate the best RDMA scenario"), TCP
/// over loopback, and UNIX domain sockets.
pub fn channels() -> Vec<NetProfile> {
    let kernel = |name, source, rtt_ns, msg_cpu_ns| NetProfile {
        name,
        source,
        rtt_ns: [rtt_ns; VerbKind::COUNT],
        // A copy through the kernel: memory bandwidth, not a wire.
        bandwidth_bytes_per_s: 5.0 * GB,
        // The kernel's CPU per message is charged to each core that sends or receives (a
        // node's threads each have their own sockets); the node's queue models only the copy,
        // at a cache line's rate.
        nic_msgs_per_s: 50e6,
        wire_header_bytes: 0,
        qp_cache_peers: u32::MAX,
        qp_miss_ns: 0,
        one_sided_in_nic: false,
        atomic_word_ns: 0,
        msg_cpu_ns,
    };
    vec![
        NetProfile {
            name: "shm",
            source: "shared memory between the instances' processes: a 64-byte ping-pong on a shared \
                     cache line measured here (MEASURED_SHM_RTT_NS); one-sided ops are the target's \
                     memory reached directly, as RDMA would",
            rtt_ns: [MEASURED_SHM_RTT_NS; VerbKind::COUNT],
            bandwidth_bytes_per_s: 5.0 * GB,
            // A cache line per message; a core moves tens of millions a second.
            nic_msgs_per_s: 50e6,
            wire_header_bytes: 0,
            qp_cache_peers: u32::MAX,
            qp_miss_ns: 0,
            one_sided_in_nic: true,
            atomic_word_ns: 0,
            msg_cpu_ns: 0,
        },
        kernel(
            "tcp-local",
            "TCP over loopback between the instances' processes (TCP_NODELAY): round trip and CPU \
             per message measured here (MEASURED_TCP_LOCAL_*)",
            MEASURED_TCP_LOCAL_RTT_NS,
            MEASURED_TCP_LOCAL_MSG_CPU_NS,
        ),
        kernel(
            "unix",
            "UNIX domain stream sockets between the instances' processes (Silo's channel in the \
             paper's §6): round trip and CPU per message measured here (MEASURED_UNIX_*)",
            MEASURED_UNIX_RTT_NS,
            MEASURED_UNIX_MSG_CPU_NS,
        ),
    ]
}

/// The channel named `name`, or the accepted names.
pub fn channel(name: &str) -> Result<NetProfile, ProfileError> {
    let all = channels();
    let names: Vec<&str> = all.iter().map(|p| p.name).collect();
    let accepted =
        names.join(", ") + &atoll_fabric::names::did_you_mean(name, names.iter().copied());
    all.into_iter()
        .find(|p| p.name == name)
        .ok_or_else(|| ProfileError::UnknownChannel {
            name: name.to_string(),
            accepted,
        })
}

/// The profile named `name`, or the accepted names.
pub fn profile(name: &str) -> Result<NetProfile, ProfileError> {
    let all = profiles();
    let names: Vec<&str> = all.iter().map(|p| p.name).collect();
    let accepted =
        names.join(", ") + &atoll_fabric::names::did_you_mean(name, names.iter().copied());
    all.into_iter()
        .find(|p| p.name == name)
        .ok_or_else(|| ProfileError::UnknownNet {
            name: name.to_string(),
            accepted,
        })
}

impl NetProfile {
    /// Time a NIC queue is busy with one message of `payload_bytes`.
    pub fn service_ns(&self, payload_bytes: u64) -> u64 {
        let by_rate = 1e9 / self.nic_msgs_per_s;
        let by_bytes =
            (payload_bytes + self.wire_header_bytes) as f64 * 1e9 / self.bandwidth_bytes_per_s;
        by_rate.max(by_bytes).ceil() as u64
    }

    /// Extra NIC time per op for a node talking to `peers` connections.
    pub fn qp_penalty_ns(&self, peers: u32) -> u64 {
        if peers <= self.qp_cache_peers {
            return 0;
        }
        let missing = (peers - self.qp_cache_peers) as f64 / peers as f64;
        (self.qp_miss_ns as f64 * missing).round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_profiles_by_name_scale_and_refuse_bad_values() {
        assert_eq!(cpu_profile("xeon", 1.0).unwrap(), CpuProfile::xeon());
        let c = cpu_profile("calibrated", 1.0).unwrap();
        assert_eq!(c, CpuProfile::calibrated());
        assert!(c.txn_ns > 0 && c.txn_ns_per_access > 0, "{c:?}");
        let twice = cpu_profile("calibrated", 2.0).unwrap();
        assert_eq!(twice.post_ns, (c.post_ns as f64 * 2.0).round() as u64);
        assert_eq!(twice.name, "calibrated*2");
        assert!(cpu_profile("pentium", 1.0)
            .unwrap_err()
            .to_string()
            .contains("accepted are calibrated, xeon"));
        for bad in [0.0, -1.0, f64::NAN, CPU_SCALE_MAX * 2.0] {
            assert!(cpu_profile("xeon", bad).is_err(), "{bad} accepted");
        }
    }
}
