//! Seeded, reproducible faults for the simulator: latency spikes on links, node pauses (the
//! node neither serves nor sends), crashes (a hook for recovery; a crashed node stops
//! for good), freezes (a long pause whose missed ops time out: a node that may be declared
//! dead and come back), and torn verbs (a multi-word READ or WRITE done in steps that other verbs and
//! CPU accesses interleave with, as RDMA promises no atomicity beyond a word).

use atoll_fabric::ids::NodeId;
use atoll_fabric::rng::Rng;

/// Stalls are drawn per thousand messages.
const PERMILLE: u64 = 1000;
/// Most spikes, and most pauses, a run may ask for: the simulator scans every spike for each
/// message sent and every pause of a node for each step, so far larger counts make each
/// message slow (100,000,000 spikes never got a run going).
pub const FAULT_COUNT_MAX: u64 = 1_000;
/// Longest spike, spike delay, pause or tear stall, in microseconds (an hour): beyond any
/// simulated run, and far from overflowing the simulator's u64 nanosecond clock.
pub const FAULT_DURATION_US_MAX: u64 = 3_600_000_000;
/// Nanoseconds per microsecond.
const NS_PER_US: u64 = 1_000;

/// How many faults of each kind a run gets, and how bad they are.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct FaultConfig {
    pub spikes: u32,
    pub spike_extra_ns: u64,
    pub spike_len_ns: u64,
    pub pauses: u32,
    pub pause_len_ns: u64,
    /// Words a NIC moves in one step of a multi-word READ or WRITE (0: whole verbs at once).
    pub tear_words: u32,
    /// Longest stall between two steps (seeded, uniform), on top of their wire time.
    pub tear_stall_ns: u64,
    /// Messages and verbs per thousand that stall on their link (a writer descheduled
    /// between two verbs of a doorbell, a NIC hiccup); later ones on the link wait behind.
    pub stall_permille: u32,
    /// Longest such stall (seeded, uniform).
    pub stall_ns: u64,
    /// A node that crashes for good, and when (virtual nanoseconds from the start).
    pub crash: Option<(NodeId, u64)>,
    /// A crash's moment spread: it happens at its time plus a seeded uniform draw of up to
    /// this (a matrix of seeds crashes the node at random moments, each replaying exactly).
    pub crash_spread_ns: u64,
    /// How long an op to a crashed node waits before it fails as timed out; `None`:
    /// [`crate::OP_TIMEOUT_NS_DEFAULT`].
    pub op_timeout_ns: Option<u64>,
    /// With a crash: instead of stopping for good, the node freezes this long (a stopped
    /// process, a paused machine: CPU and NIC stand still, memory and state kept), then
    /// goes on where it was. An op to it whose timeout passes meanwhile fails at its
    /// requester and is never performed (the requester's connection gave it up). 0: a crash.
    pub freeze_ns: u64,
}

impl FaultConfig {
    pub const NONE: &'static str = "none";

    /// A few of each: the default when faults are asked for without numbers.
    /// The longest a run's co-routines may wait on these faults at once, counted without
    /// overlap: a spike's extra delay and length, a pause, an op of `op_words_max` words
    /// torn into `tear_words` pieces with a stall after each, a stall, and an op's timeout.
    /// The simulator's idle limit covers it.
    pub fn longest_wait_ns(&self, op_words_max: u64) -> u64 {
        let mut ns = self.op_timeout_ns();
        if self.spikes > 0 {
            ns = ns.saturating_add(self.spike_extra_ns.saturating_add(self.spike_len_ns));
        }
        if self.pauses > 0 {
            ns = ns.saturating_add(self.pause_len_ns);
        }
        if self.tear_words > 0 {
            let pieces = op_words_max.div_ceil(self.tear_words as u64).max(1);
            ns = ns.saturating_add(self.tear_stall_ns.saturating_mul(pieces));
        }
        if self.stall_permille > 0 {
            ns = ns.saturating_add(self.stall_ns);
        }
        ns.saturating_add(self.freeze_ns)
    }

    pub fn some() -> Self {
        FaultConfig {
            spikes: 4,
            spike_extra_ns: 200_000,
            spike_len_ns: 2_000_000,
            pauses: 2,
            pause_len_ns: 1_000_000,
            // Two words a step tears payloads inside a record (a 16-byte PCIe write is a
            // common unit); 100 ns stalls let several verbs interleave with one.
            tear_words: 2,
            tear_stall_ns: 100,
            // One in 200 verbs stalls up to 20 us: long enough for several round trips of
            // other co-routines to see a doorbell half done.
            stall_permille: 5,
            stall_ns: 20_000,
            // Crashes end a run's figures: only asked for by name.
            crash: None,
            crash_spread_ns: 0,
            op_timeout_ns: None,
            freeze_ns: 0,
        }
    }

    /// The op timeout of a run with these faults.
    pub fn op_timeout_ns(&self) -> u64 {
        self.op_timeout_ns.unwrap_or(crate::OP_TIMEOUT_NS_DEFAULT)
    }

    pub fn is_none(&self) -> bool {
        self.spikes == 0
            && self.pauses == 0
            && self.tear_words == 0
            && self.stall_permille == 0
            && self.crash.is_none()
    }

    /// The faults as the keys and values `--faults` takes ([`FaultConfig::parse`] of them
    /// joined as `k=v,...` gives the same faults back): what a report states.
    pub fn to_keys(&self) -> std::collections::BTreeMap<&'static str, u64> {
        let mut k: std::collections::BTreeMap<&'static str, u64> = [
            ("spikes", self.spikes as u64),
            ("spike_us", self.spike_extra_ns / NS_PER_US),
            ("spike_len_us", self.spike_len_ns / NS_PER_US),
            ("pauses", self.pauses as u64),
            ("pause_us", self.pause_len_ns / NS_PER_US),
            ("tear_words", self.tear_words as u64),
            ("tear_ns", self.tear_stall_ns),
            ("stall_permille", self.stall_permille as u64),
            ("stall_us", self.stall_ns / NS_PER_US),
        ]
        .into();
        if let Some((node, at_ns)) = self.crash {
            k.insert("crash_node", node.0 as u64);
            k.insert("crash_us", at_ns / NS_PER_US);
            if self.crash_spread_ns > 0 {
                k.insert("crash_spread_us", self.crash_spread_ns / NS_PER_US);
            }
            if self.freeze_ns > 0 {
                k.insert("freeze_us", self.freeze_ns / NS_PER_US);
            }
        }
        if let Some(ns) = self.op_timeout_ns {
            k.insert("op_timeout_us", ns / NS_PER_US);
        }
        k
    }

    /// Parses `none`, `some`, or
    /// `spikes=N,spike_us=X,spike_len_us=Y,pauses=N,pause_us=Z,tear_words=W,tear_ns=S,
    /// stall_permille=P,stall_us=T,crash_node=C,crash_us=U,crash_spread_us=V,freeze_us=F,op_timeout_us=O` (unnamed values
    /// as in `some`; `tear_words=0` turns tearing off, `stall_permille=0` stalls; a crash
    /// needs `crash_node`, at `crash_us` or 0).
    pub fn parse(s: &str) -> Result<Self, FaultsError> {
        match s.trim() {
            "none" | "" => return Ok(FaultConfig::default()),
            "some" => return Ok(FaultConfig::some()),
            _ => {}
        }
        let mut f = FaultConfig::some();
        // `crash_us` may come before `crash_node`.
        let mut crash_at_ns = None;
        let mut spread_given = false;
        let mut freeze_given = false;
        let mut seen: Vec<&str> = Vec::new();
        for part in s.split(',') {
            let (k, v) = part
                .split_once('=')
                .ok_or_else(|| FaultsError::NotKeyValue(part.to_string()))?;
            // The last of two would win in silence: a typo'd run, refused instead.
            if seen.contains(&k.trim()) {
                return Err(FaultsError::Duplicate(k.trim().to_string()));
            }
            seen.push(k.trim());
            let v: u64 = v.trim().parse().map_err(|_| FaultsError::NotWholeNumber {
                key: k.trim().to_string(),
                value: v.trim().to_string(),
            })?;
            let key = k.trim();
            let at_most = |max: u64, unit: &'static str| -> Result<u64, FaultsError> {
                if v > max {
                    Err(FaultsError::OutOfRange {
                        key: key.to_string(),
                        value: v,
                        max,
                        unit,
                    })
                } else {
                    Ok(v)
                }
            };
            let count = || at_most(FAULT_COUNT_MAX, "").map(|v| v as u32);
            let us = || at_most(FAULT_DURATION_US_MAX, " microseconds").map(|v| v * NS_PER_US);
            match key {
                "spikes" => f.spikes = count()?,
                "spike_us" => f.spike_extra_ns = us()?,
                "spike_len_us" => f.spike_len_ns = us()?,
                "pauses" => f.pauses = count()?,
                "pause_us" => f.pause_len_ns = us()?,
                "tear_words" => f.tear_words = v.min(u32::MAX as u64) as u32,
                "tear_ns" => {
                    f.tear_stall_ns = at_most(FAULT_DURATION_US_MAX * NS_PER_US, " nanoseconds")?
                }
                "stall_permille" => f.stall_permille = at_most(PERMILLE, " per mille")? as u32,
                "stall_us" => {
                    f.stall_ns = at_most(FAULT_DURATION_US_MAX, " microseconds")? * NS_PER_US
                }
                "crash_node" => {
                    let node = NodeId(at_most(u16::MAX as u64, "")? as u16);
                    f.crash = Some((node, f.crash.map_or(0, |c| c.1)));
                }
                "crash_us" => {
                    let at_ns = us()?;
                    crash_at_ns = Some(at_ns);
                }
                "crash_spread_us" => {
                    f.crash_spread_ns = us()?;
                    spread_given = true;
                }
                "freeze_us" => {
                    f.freeze_ns = us()?;
                    freeze_given = true;
                }
                "op_timeout_us" => f.op_timeout_ns = Some(us()?.max(1)),
                other => return Err(FaultsError::UnknownKey(other.to_string())),
            }
        }
        match (&mut f.crash, crash_at_ns) {
            (Some(c), Some(at_ns)) => c.1 = at_ns,
            (None, Some(_)) => return Err(FaultsError::CrashWithoutNode("crash_us")),
            _ => {}
        }
        if spread_given && f.crash.is_none() {
            return Err(FaultsError::CrashWithoutNode("crash_spread_us"));
        }
        if freeze_given && f.crash.is_none() {
            return Err(FaultsError::CrashWithoutNode("freeze_us"));
        }
        Ok(f)
    }
}

/// A `--faults` value that does not parse, naming the bad entry and what is accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum FaultsError {
    #[error("faults entry '{0}' is not KEY=VALUE: accepted are none, some, or spikes=N,spike_us=X,spike_len_us=Y,pauses=N,pause_us=Z,tear_words=W,tear_ns=S,stall_permille=P,stall_us=T,crash_node=C,crash_us=U,crash_spread_us=V,freeze_us=F,op_timeout_us=O")]
    NotKeyValue(String),
    #[error("faults {key}={value} is not a whole number")]
    NotWholeNumber { key: String, value: String },
    /// `unit` follows the bound, with its leading space (or empty for a count).
    #[error("faults {key}={value} is out of range: expected 0..={max}{unit}")]
    OutOfRange {
        key: String,
        value: u64,
        max: u64,
        unit: &'static str,
    },
    #[error("unknown faults key '{0}': accepted are spikes, spike_us, spike_len_us, pauses, pause_us, tear_words, tear_ns, stall_permille, stall_us, crash_node, crash_us, crash_spread_us, freeze_us, op_timeout_us")]
    UnknownKey(String),
    #[error("faults {0} needs crash_node (the node that crashes)")]
    CrashWithoutNode(&'static str),
    #[error("faults key '{0}' is given twice: expected each key once")]
    Duplicate(String),
}

/// One scheduled fault.
#[derive(Clone, Debug, PartialEq)]
pub enum Fault {
    /// Messages departing `from` towards `to` in `[start, end)` take `extra_ns` longer.
    Spike {
        from: NodeId,
        to: NodeId,
        start_ns: u64,
        end_ns: u64,
        extra_ns: u64,
    },
    /// The node runs nothing and its NIC serves nothing in `[start, end)`.
    Pause {
        node: NodeId,
        start_ns: u64,
        end_ns: u64,
    },
    /// The node stops for good at `at_ns`.
    Crash { node: NodeId, at_ns: u64 },
    /// The node stands still in `[start, end)`, CPU and NIC, then goes on where it was; an
    /// op to it whose timeout passes meanwhile fails at its requester, never performed.
    Freeze {
        node: NodeId,
        start_ns: u64,
        end_ns: u64,
    },
    /// Every multi-word READ or WRITE moves `chunk_words` at a time, with a stall drawn
    /// from `seed` of up to `stall_ns_max` between steps; verbs on one link still execute
    /// in order (RC).
    Tear {
        chunk_words: u32,
        stall_ns_max: u64,
        seed: u64,
    },
    /// Each message or verb, with probability `permille`/1000 drawn from `seed`, stalls on
    /// its link for up to `stall_ns_max`; later ones on that link arrive after it.
    Stall {
        permille: u32,
        stall_ns_max: u64,
        seed: u64,
    },
}

/// Draws the faults of a run over `[0, horizon_ns)` from `seed`.
pub fn plan(cfg: &FaultConfig, nodes: u16, horizon_ns: u64, seed: u64) -> Vec<Fault> {
    let mut rng = Rng::derive(seed, 0xFA17);
    let mut out = Vec::new();
    if cfg.tear_words > 0 {
        out.push(Fault::Tear {
            chunk_words: cfg.tear_words,
            stall_ns_max: cfg.tear_stall_ns,
            seed: rng.next_u64(),
        });
    }
    if cfg.stall_permille > 0 && cfg.stall_ns > 0 {
        out.push(Fault::Stall {
            permille: cfg.stall_permille,
            stall_ns_max: cfg.stall_ns,
            seed: rng.next_u64(),
        });
    }
    if let Some((node, at_ns)) = cfg.crash {
        // A stream of its own, so a spread moves no other fault of the seed.
        let spread_ns = match cfg.crash_spread_ns {
            0 => 0,
            s => Rng::derive(seed, 0xC7A5).below(s + 1),
        };
        let at_ns = at_ns + spread_ns;
        out.push(match cfg.freeze_ns {
            0 => Fault::Crash { node, at_ns },
            len => Fault::Freeze {
                node,
                start_ns: at_ns,
                end_ns: at_ns + len,
            },
        });
    }
    if nodes < 2 || horizon_ns == 0 {
        return out;
    }
    for _ in 0..cfg.spikes {
        let from = rng.below(nodes as u64) as u16;
        let to = (from as u64 + 1 + rng.below(nodes as u64 - 1)) as u16 % nodes;
        let start_ns = rng.below(horizon_ns);
        out.push(Fault::Spike {
            from: NodeId(from),
            to: NodeId(to),
            start_ns,
            end_ns: start_ns + cfg.spike_len_ns,
            extra_ns: cfg.spike_extra_ns,
        });
    }
    for _ in 0..cfg.pauses {
        let node = NodeId(rng.below(nodes as u64) as u16);
        let start_ns = rng.below(horizon_ns);
        out.push(Fault::Pause {
            node,
            start_ns,
            end_ns: start_ns + cfg.pause_len_ns,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_stated_as_keys_parse_back_to_the_same_faults() {
        for s in [
            "some",
            "none",
            "spikes=3,pause_us=1500,tear_words=2,tear_ns=700,crash_node=1,crash_us=250,op_timeout_us=90",
            "crash_node=2,crash_us=100,crash_spread_us=400",
            "crash_node=1,crash_us=100,freeze_us=3000",
        ] {
            let f = FaultConfig::parse(s).unwrap();
            let text: Vec<String> = f.to_keys().iter().map(|(k, v)| format!("{k}={v}")).collect();
            assert_eq!(FaultConfig::parse(&text.join(",")).unwrap(), f, "{s}");
        }
    }

    #[test]
    fn faults_a_crash_spread_moves_the_crash_by_seed_within_its_bound_and_replays() {
        let f = FaultConfig::parse("crash_node=1,crash_us=100,crash_spread_us=50").unwrap();
        let at = |seed| {
            plan(&f, 3, 1_000_000, seed)
                .into_iter()
                .find_map(|x| match x {
                    Fault::Crash { node, at_ns } => Some((node, at_ns)),
                    _ => None,
                })
                .expect("a crash is planned")
        };
        let moments: std::collections::BTreeSet<u64> = (0..64).map(|s| at(s).1).collect();
        assert!(
            moments.len() > 32,
            "64 seeds gave {} moments",
            moments.len()
        );
        assert!(
            moments.iter().all(|&ns| (100_000..=150_000).contains(&ns)),
            "{moments:?}"
        );
        assert_eq!(at(7), at(7));
        assert_eq!(at(7).0, NodeId(1));
        assert_eq!(
            FaultConfig::parse("crash_spread_us=5"),
            Err(FaultsError::CrashWithoutNode("crash_spread_us"))
        );
        assert_eq!(
            FaultConfig::parse("freeze_us=5"),
            Err(FaultsError::CrashWithoutNode("freeze_us"))
        );
    }
}
