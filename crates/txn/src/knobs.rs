//! A protocol family's own configuration: the knobs it declares ([`KnobSpec`], set as
//! `--NAME` flags and TOML keys), their resolved values ([`Knobs`]), and what the family
//! makes of them ([`FamilyConfig`]): its regions, versions per record, memory and report
//! fields. The CLI, the config file, the sizing, the report and the docs' tables read these
//! declarations; nothing outside a family's folder names its knobs.

use atoll_storage::ExtraRegion;
use std::any::Any;
use std::fmt;

/// What values a knob takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KnobKind {
    /// Off unless given (`--NAME`, or `NAME = true` in TOML).
    Flag,
    /// A whole number in `min..=max`.
    Number { default: u64, min: u64, max: u64 },
    /// One of `accepted`.
    Choice {
        default: &'static str,
        accepted: &'static [&'static str],
    },
}

/// One knob a family declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnobSpec {
    /// Its TOML key and, with `-` for `_`, its flag (`--NAME`).
    pub name: &'static str,
    pub kind: KnobKind,
    /// One sentence: what it does, with the paper it comes from where it has one.
    pub help: &'static str,
}

impl KnobSpec {
    /// The flag that sets it, without the leading `--`.
    pub fn flag(&self) -> String {
        self.name.replace('_', "-")
    }

    pub fn default_value(&self) -> KnobValue {
        match self.kind {
            KnobKind::Flag => KnobValue::Flag(false),
            KnobKind::Number { default, .. } => KnobValue::Number(default),
            KnobKind::Choice { default, .. } => KnobValue::Choice(default),
        }
    }

    /// What it accepts, as its help and errors say it (`0..=64`, `coordinator, node`).
    pub fn accepted(&self) -> String {
        match self.kind {
            KnobKind::Flag => "true, false".into(),
            KnobKind::Number { min, max, .. } => format!("{min}..={max}"),
            KnobKind::Choice { accepted, .. } => accepted.join(", "),
        }
    }

    /// The value `text` gives it, or why it is refused (naming the knob and what it accepts).
    pub fn parse(&self, text: &str) -> Result<KnobValue, KnobError> {
        let text = text.trim();
        match self.kind {
            KnobKind::Flag => match text {
                "true" => Ok(KnobValue::Flag(true)),
                "false" => Ok(KnobValue::Flag(false)),
                _ => Err(KnobError(format!(
                    "{}={text} is not a flag value: expected true or false",
                    self.name
                ))),
            },
            KnobKind::Number { min, max, .. } => {
                let v: u64 = text.parse().map_err(|_| {
                    KnobError(format!(
                        "{}={text} is not a whole number: expected {min}..={max}",
                        self.name
                    ))
                })?;
                if v < min || v > max {
                    return Err(KnobError(format!(
                        "{}={v} is out of range: expected {min}..={max}",
                        self.name
                    )));
                }
                Ok(KnobValue::Number(v))
            }
            KnobKind::Choice { accepted, .. } => accepted
                .iter()
                .find(|a| **a == text)
                .map(|a| KnobValue::Choice(a))
                .ok_or_else(|| {
                    KnobError(format!(
                        "unknown {} '{text}': accepted are {}",
                        self.name,
                        accepted.join(", ")
                    ))
                }),
        }
    }
}

/// A knob's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KnobValue {
    Flag(bool),
    Number(u64),
    Choice(&'static str),
}

impl fmt::Display for KnobValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KnobValue::Flag(b) => write!(f, "{b}"),
            KnobValue::Number(n) => write!(f, "{n}"),
            KnobValue::Choice(c) => f.write_str(c),
        }
    }
}

/// A knob value refused, or knobs that do not go together; the message names the knob and
/// what is accepted.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct KnobError(pub String);

/// Every knob one family declares, resolved: the given value or the default, and whether it
/// was given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Knobs {
    values: Vec<(KnobSpec, KnobValue, bool)>,
}

impl Knobs {
    /// Every knob of `specs` at its default.
    pub fn defaults(specs: &[KnobSpec]) -> Knobs {
        Knobs {
            values: specs
                .iter()
                .map(|s| (*s, s.default_value(), false))
                .collect(),
        }
    }

    /// `specs` with the values of `given` (name, text); a name `specs` does not declare is
    /// refused (the caller names the family that does).
    pub fn resolve<'a>(
        specs: &[KnobSpec],
        given: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Knobs, KnobError> {
        let mut knobs = Knobs::defaults(specs);
        for (name, text) in given {
            let slot = knobs
                .values
                .iter_mut()
                .find(|(s, _, _)| s.name == name)
                .ok_or_else(|| KnobError(format!("unknown knob {name}")))?;
            slot.1 = slot.0.parse(text)?;
            slot.2 = true;
        }
        Ok(knobs)
    }

    fn slot(&self, name: &str) -> &(KnobSpec, KnobValue, bool) {
        self.values
            .iter()
            .find(|(s, _, _)| s.name == name)
            .unwrap_or_else(|| {
                panic!(
                    "knob {name} is not declared by this family (it declares {:?})",
                    self.values
                        .iter()
                        .map(|(s, _, _)| s.name)
                        .collect::<Vec<_>>()
                )
            })
    }

    /// A declared flag's value.
    pub fn flag(&self, name: &str) -> bool {
        match self.slot(name).1 {
            KnobValue::Flag(b) => b,
            other => panic!("knob {name} is not a flag: {other:?}"),
        }
    }

    /// A declared number's value.
    pub fn number(&self, name: &str) -> u64 {
        match self.slot(name).1 {
            KnobValue::Number(n) => n,
            other => panic!("knob {name} is not a number: {other:?}"),
        }
    }

    /// A declared choice's value.
    pub fn choice(&self, name: &str) -> &'static str {
        match self.slot(name).1 {
            KnobValue::Choice(c) => c,
            other => panic!("knob {name} is not a choice: {other:?}"),
        }
    }

    /// Whether the run set it (a knob that needs another can be refused only when given).
    pub fn given(&self, name: &str) -> bool {
        self.slot(name).2
    }

    /// Every knob with its value, in declaration order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, KnobValue)> + '_ {
        self.values.iter().map(|(s, v, _)| (s.name, *v))
    }
}

/// The cluster a family sizes its regions and memory for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClusterShape {
    /// Co-routines running transactions, over every compute node.
    pub coordinators_total: u32,
    /// Co-routines on each compute node.
    pub coordinators_per_node: u32,
    pub compute_nodes: u32,
    /// The run's plan: a family registers a stage's one-sided buffers only when it runs so.
    pub plan: crate::Plan,
}

/// Heap bytes a family's configuration needs beside its regions, as the sizing counts them
/// before anything is allocated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FamilyHeap {
    /// Over the whole cluster (e.g. NAM-DB's snapshot vectors on its coordinators).
    pub cluster_bytes: u64,
    /// What `cluster_bytes` holds, and the knob that shrinks it, for the sizing's refusal.
    pub cluster_what: &'static str,
    pub cluster_hint: &'static str,
    /// On each node holding records, per record slot of its tables (e.g. NAM-DB's mover
    /// notes).
    pub per_record_bytes: u64,
    /// Copies of the tables the family keeps off the memory nodes, in percent of what the
    /// tables take at start (Tell's shared record buffers: compute nodes × buffer percent).
    pub table_copies_percent: u64,
}

/// What a family makes of its knobs, built once at start-up ([`crate::Protocol::configure`])
/// and held type-erased in [`crate::TxnConfig::family`]; the family reads its own type back
/// with [`crate::TxnConfig::family`].
pub trait FamilyConfig: Any + fmt::Debug + Send + Sync {
    fn as_any(&self) -> &dyn Any;

    /// The configuration of type `t` this one holds, if it holds several ([`FamilySet`]).
    fn member(&self, _t: std::any::TypeId) -> Option<&dyn Any> {
        None
    }

    /// A sequenced family's epoch: how long its lanes collect requests before dispatching.
    fn epoch_ns(&self) -> Option<u64> {
        None
    }

    /// Versions each record keeps (the catalog lays out this many slots).
    fn version_slots(&self) -> u32 {
        1
    }

    /// Overflow entries per record slot each table keeps (NAM-DB's old versions).
    fn overflow_per_record(&self) -> u32 {
        0
    }

    /// The family's own regions, registered by every node after the log, in this order.
    fn regions(&self, _shape: &ClusterShape) -> Vec<ExtraRegion> {
        Vec::new()
    }

    /// The family's regions sized by the tables (Tell's B+tree index), registered after
    /// [`FamilyConfig::regions`] by nodes holding records only: `tables[t]` is the record
    /// slots table `t` keeps on each such node, as loaded and as reserved for its growth.
    /// Like a table's, such a region reserves room for the growth and becomes memory as it
    /// is used: the run counts [`FamilyConfig::table_regions_start_bytes`] at start, and the
    /// family takes its growth from the budget as it goes.
    fn table_regions(&self, _tables: &[atoll_storage::TableSlots]) -> Vec<ExtraRegion> {
        Vec::new()
    }

    /// Bytes of [`FamilyConfig::table_regions`] in use at start on a node holding records.
    fn table_regions_start_bytes(&self, _tables: &[atoll_storage::TableSlots]) -> u64 {
        0
    }

    /// Builds what the family keeps beside the records a node holding them just loaded
    /// (Tell's B+tree of each table), before any transaction runs; `Err` says what failed.
    fn after_load(&self, _store: &atoll_storage::Store) -> Result<(), String> {
        Ok(())
    }

    /// Checks what the family keeps beside the records on a node holding them, after the
    /// run (Tell's B+tree index reaches every record slot).
    fn check_node(&self, _store: &atoll_storage::Store) -> Vec<StateCheck> {
        Vec::new()
    }

    /// Why the family's knobs keep it from recovering a crashed node in a cluster of this
    /// shape (beside the plan's reasons, [`crate::Protocol::recovery_refusal`]), for a run
    /// with a crash to refuse up front.
    fn crash_refusal(&self, _shape: &ClusterShape) -> Option<String> {
        None
    }

    /// Takes back, on a node holding records, what the family keeps in them on behalf of
    /// the dead node `dead`'s transactions (WAITDIE's waiter counters), once no op of that
    /// node can land here (it is fenced); returns how many records it changed.
    fn settle_dead_node(
        &self,
        _store: &atoll_storage::Store,
        _dead: atoll_fabric::NodeId,
        _coordinators_per_node: u32,
    ) -> u64 {
        0
    }

    /// Heap the family needs beside its regions.
    fn heap(&self, _shape: &ClusterShape) -> FamilyHeap {
        FamilyHeap::default()
    }

    /// Fields the report's configuration shows beside the family's knobs (values derived
    /// from them).
    fn report_fields(&self, _shape: &ClusterShape) -> Vec<(&'static str, KnobValue)> {
        Vec::new()
    }
}

/// One node's part of a check the family makes of what it keeps beside the records
/// (Tell's B+tree index), from the final state ([`FamilyConfig::check_node`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StateCheck {
    /// The check's name in reports (`tell.index_reaches_every_slot`).
    pub name: &'static str,
    /// What it checks, of each item (`a record slot is found by its key in its table's
    /// B+tree`).
    pub what: &'static str,
    pub checked: u64,
    pub failed: u64,
    /// The first few failed items, named.
    pub examples: Vec<String>,
}

/// The configuration of a family that declares no knob.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoKnobs;

impl FamilyConfig for NoKnobs {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// The configurations of several families at once, each at its defaults: what a scripted
/// test cluster serves whichever family its co-routines run with (a run configures exactly
/// one). Its regions are every member's, once each by name.
#[derive(Debug)]
pub struct FamilySet(pub Vec<std::sync::Arc<dyn FamilyConfig>>);

impl FamilyConfig for FamilySet {
    fn as_any(&self) -> &dyn Any {
        self
    }

    fn member(&self, t: std::any::TypeId) -> Option<&dyn Any> {
        self.0
            .iter()
            .map(|f| f.as_any())
            .find(|a| (*a).type_id() == t)
    }

    fn regions(&self, shape: &ClusterShape) -> Vec<ExtraRegion> {
        let mut out: Vec<ExtraRegion> = Vec::new();
        for r in self.0.iter().flat_map(|f| f.regions(shape)) {
            match out.iter().find(|o| o.name == r.name) {
                Some(o) => assert_eq!(*o, r, "two families size region {} differently", r.name),
                None => out.push(r),
            }
        }
        out
    }

    fn table_regions(&self, tables: &[atoll_storage::TableSlots]) -> Vec<ExtraRegion> {
        let mut out: Vec<ExtraRegion> = Vec::new();
        for r in self.0.iter().flat_map(|f| f.table_regions(tables)) {
            match out.iter().find(|o| o.name == r.name) {
                Some(o) => assert_eq!(*o, r, "two families size region {} differently", r.name),
                None => out.push(r),
            }
        }
        out
    }

    fn after_load(&self, store: &atoll_storage::Store) -> Result<(), String> {
        self.0.iter().try_for_each(|f| f.after_load(store))
    }

    fn check_node(&self, store: &atoll_storage::Store) -> Vec<StateCheck> {
        self.0.iter().flat_map(|f| f.check_node(store)).collect()
    }

    fn crash_refusal(&self, shape: &ClusterShape) -> Option<String> {
        self.0.iter().find_map(|f| f.crash_refusal(shape))
    }

    fn settle_dead_node(
        &self,
        store: &atoll_storage::Store,
        dead: atoll_fabric::NodeId,
        coordinators_per_node: u32,
    ) -> u64 {
        self.0
            .iter()
            .map(|f| f.settle_dead_node(store, dead, coordinators_per_node))
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPECS: [KnobSpec; 3] = [
        KnobSpec {
            name: "slots",
            kind: KnobKind::Number {
                default: 4,
                min: 1,
                max: 64,
            },
            help: "versions",
        },
        KnobSpec {
            name: "fast",
            kind: KnobKind::Flag,
            help: "a flag",
        },
        KnobSpec {
            name: "owner",
            kind: KnobKind::Choice {
                default: "a",
                accepted: &["a", "b"],
            },
            help: "a choice",
        },
    ];

    #[test]
    fn knobs_take_their_defaults_unless_given() {
        let k = Knobs::resolve(&SPECS, [("fast", "true"), ("owner", "b")]).unwrap();
        assert_eq!(k.number("slots"), 4);
        assert!(!k.given("slots"));
        assert!(k.flag("fast") && k.given("fast"));
        assert_eq!(k.choice("owner"), "b");
    }

    #[test]
    fn knob_values_outside_what_is_accepted_are_refused_naming_both() {
        let err = |n: &str, v: &str| Knobs::resolve(&SPECS, [(n, v)]).unwrap_err().0;
        assert_eq!(
            err("slots", "0"),
            "slots=0 is out of range: expected 1..=64"
        );
        assert_eq!(
            err("slots", "many"),
            "slots=many is not a whole number: expected 1..=64"
        );
        assert_eq!(err("owner", "c"), "unknown owner 'c': accepted are a, b");
        assert_eq!(
            err("fast", "yes"),
            "fast=yes is not a flag value: expected true or false"
        );
        assert_eq!(err("speed", "1"), "unknown knob speed");
    }
}
