//! Atoll's concurrency-control protocols, one module per family, each composing the shared
//! stage building blocks of `atoll_txn::stages` with its own, with the primitive its
//! run-time plan names. A family with requests of its own (WAITDIE, SUNDIAL, MVCC) has a
//! coordinator side, a participant side and its messages in its module, and registers its
//! participant in [`participants`].

use atoll_storage::{Placement, RoleSpec};
use atoll_txn::handler::Participant;
use atoll_txn::knobs::KnobError;
use atoll_txn::{FamilyConfig, KnobSpec, Knobs, Protocol};
use std::sync::Arc;

pub mod calvin;
pub mod mvcc;
pub mod namdb;
pub mod nowait;
pub mod occ;
pub mod rsi;
pub mod sundial;
pub mod tell;
pub mod waitdie;

pub use calvin::Calvin;
pub use mvcc::Mvcc;
pub use namdb::NamDb;
pub use nowait::NoWait;
pub use occ::Occ;
pub use rsi::Rsi;
pub use sundial::Sundial;
pub use tell::Tell;
pub use waitdie::WaitDie;

/// Every family's participant side, one per node: the registration list. A family with
/// node-wide state keeps it in `nodes`, which the node's coordinators share; a family reads
/// the run's configuration of it from `family`.
pub fn participants(
    nodes: &atoll_txn::FamilyNodes,
    family: &dyn FamilyConfig,
) -> Vec<Arc<dyn Participant>> {
    vec![
        Arc::new(waitdie::WaitDieParticipant::default()),
        Arc::new(sundial::SundialParticipant),
        Arc::new(mvcc::MvccParticipant),
        Arc::new(rsi::participant::RsiParticipant),
        Arc::new(calvin::participant::CalvinParticipant {
            node: nodes.get(calvin::msg::FAMILY),
        }),
        Arc::new(tell::participant::TellParticipant {
            node: nodes.get(tell::msg::FAMILY),
            cfg: family_of(family).unwrap_or_default(),
        }),
    ]
}

/// The run's configuration of family `C`, if the run is of that family.
fn family_of<C: FamilyConfig + Copy>(family: &dyn FamilyConfig) -> Option<C> {
    let own = family.as_any().downcast_ref::<C>();
    own.or_else(|| {
        family
            .member(std::any::TypeId::of::<C>())
            .and_then(|m| m.downcast_ref::<C>())
    })
    .copied()
}

/// A protocol's name that is not one of [`ProtocolKind::ALL`]'s. Its `Debug` is its message
/// (what `main` returning it prints).
#[derive(Clone, PartialEq, Eq)]
pub struct UnknownProtocol(pub String);

impl std::fmt::Debug for UnknownProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}

impl std::fmt::Display for UnknownProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "protocol {:?}: expected one of {}",
            self.0,
            ProtocolKind::accepted()
        )
    }
}

impl std::error::Error for UnknownProtocol {}

impl std::str::FromStr for ProtocolKind {
    type Err = UnknownProtocol;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s).ok_or_else(|| UnknownProtocol(s.to_string()))
    }
}

/// The protocols a run can select, by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProtocolKind {
    NoWait,
    WaitDie,
    Occ,
    Mvcc,
    Sundial,
    Rsi,
    NamDb,
    Calvin,
    Tell,
}

impl ProtocolKind {
    pub const ALL: [ProtocolKind; 9] = [
        ProtocolKind::NoWait,
        ProtocolKind::WaitDie,
        ProtocolKind::Occ,
        ProtocolKind::Mvcc,
        ProtocolKind::Sundial,
        ProtocolKind::Rsi,
        ProtocolKind::NamDb,
        ProtocolKind::Calvin,
        ProtocolKind::Tell,
    ];

    /// Calls `v` with the protocol as a type: the one place that maps a selected protocol
    /// to its code (a run, a name, a plan check all go through it).
    pub fn dispatch<V: ProtocolVisitor>(self, v: V) -> V::Out {
        match self {
            ProtocolKind::NoWait => v.visit::<NoWait>(),
            ProtocolKind::WaitDie => v.visit::<WaitDie>(),
            ProtocolKind::Occ => v.visit::<Occ>(),
            ProtocolKind::Mvcc => v.visit::<Mvcc>(),
            ProtocolKind::Sundial => v.visit::<Sundial>(),
            ProtocolKind::Rsi => v.visit::<Rsi>(),
            ProtocolKind::NamDb => v.visit::<NamDb>(),
            ProtocolKind::Calvin => v.visit::<Calvin>(),
            ProtocolKind::Tell => v.visit::<Tell>(),
        }
    }

    pub fn name(self) -> &'static str {
        struct Name;
        impl ProtocolVisitor for Name {
            type Out = &'static str;
            fn visit<P: Protocol>(self) -> &'static str {
                P::NAME
            }
        }
        self.dispatch(Name)
    }

    /// How help and docs spell it ([`Protocol::TITLE`], else the name in capitals).
    pub fn title(self) -> String {
        struct Title;
        impl ProtocolVisitor for Title {
            type Out = &'static str;
            fn visit<P: Protocol>(self) -> Self::Out {
                P::TITLE
            }
        }
        match self.dispatch(Title) {
            "" => self.name().to_uppercase(),
            title => title.to_string(),
        }
    }

    pub fn parse(s: &str) -> Option<ProtocolKind> {
        Self::ALL
            .into_iter()
            .find(|p| p.name() == s.to_ascii_lowercase())
    }

    pub fn accepted() -> String {
        Self::ALL
            .iter()
            .map(|p| p.name())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The stages whose primitive matters to the protocol.
    pub fn stages(self) -> &'static [atoll_txn::Stage] {
        struct Stages;
        impl ProtocolVisitor for Stages {
            type Out = &'static [atoll_txn::Stage];
            fn visit<P: Protocol>(self) -> Self::Out {
                P::STAGES
            }
        }
        self.dispatch(Stages)
    }

    /// The stages the family declares of its own ([`Protocol::FAMILY_STAGES`]).
    pub fn family_stages(self) -> &'static [atoll_txn::Stage] {
        struct Own;
        impl ProtocolVisitor for Own {
            type Out = &'static [atoll_txn::Stage];
            fn visit<P: Protocol>(self) -> Self::Out {
                P::FAMILY_STAGES
            }
        }
        self.dispatch(Own)
    }

    /// The family's stages that always go to a CPU ([`Protocol::CPU_STAGES`]).
    pub fn cpu_stages(self) -> &'static [atoll_txn::Stage] {
        struct Cpu;
        impl ProtocolVisitor for Cpu {
            type Out = &'static [atoll_txn::Stage];
            fn visit<P: Protocol>(self) -> Self::Out {
                P::CPU_STAGES
            }
        }
        self.dispatch(Cpu)
    }

    /// Parses a plan for this protocol: the common stages and the family's own. A stage
    /// another family declares is refused as the protocol's checks refuse a stage it does not
    /// use (naming the stages it uses).
    pub fn parse_plan(self, s: &str) -> Result<atoll_txn::Plan, atoll_txn::PlanError> {
        use atoll_txn::Plan;
        Plan::parse_for(s, self.family_stages()).map_err(|e| {
            let foreign = Self::ALL
                .into_iter()
                .filter(|p| *p != self)
                .find_map(|p| Plan::parse_for(s, p.family_stages()).ok());
            match foreign.map(|plan| plan.check_stages(self.stages())) {
                Some(Err(named)) => named,
                _ => e,
            }
        })
    }

    /// Every valid plan of the protocol: each combination of primitives over the stages it
    /// uses (the rest one-sided), minus those `check_plan` rejects (RCC §5.1's exhaustive
    /// search).
    pub fn all_plans(self) -> Vec<atoll_txn::Plan> {
        use atoll_txn::{Plan, Primitive};
        let stages = self.stages();
        let base = Plan::uniform(Primitive::OneSided).for_family(self.family_stages());
        (0u32..1 << stages.len())
            .map(|bits| {
                stages.iter().enumerate().fold(base, |p, (i, s)| {
                    p.with(
                        *s,
                        if bits >> i & 1 == 1 {
                            Primitive::Rpc
                        } else {
                            Primitive::OneSided
                        },
                    )
                })
            })
            .filter(|p| self.check_plan(p).is_ok())
            .collect()
    }

    /// The knobs the family declares ([`Protocol::KNOBS`]).
    pub fn knobs(self) -> &'static [KnobSpec] {
        struct Specs;
        impl ProtocolVisitor for Specs {
            type Out = &'static [KnobSpec];
            fn visit<P: Protocol>(self) -> Self::Out {
                P::KNOBS
            }
        }
        self.dispatch(Specs)
    }

    /// Every knob some family declares, once, with the families declaring it (in
    /// registration order): what the CLI and the config file accept.
    pub fn all_knobs() -> Vec<(KnobSpec, Vec<ProtocolKind>)> {
        declared_by_families(Self::knobs, |k| k.name, "knob")
    }

    /// The family's knobs resolved from `given` (name, text) and its configuration
    /// ([`Protocol::configure`]). A knob of another family is refused naming the families
    /// that declare it.
    pub fn configure<'a>(
        self,
        given: impl IntoIterator<Item = (&'a str, &'a str)> + Clone,
    ) -> Result<(Knobs, Arc<dyn FamilyConfig>), KnobError> {
        for (name, text) in given.clone() {
            if self.knobs().iter().any(|s| s.name == name) {
                continue;
            }
            let all = Self::all_knobs();
            let Some((spec, families)) = all.iter().find(|(s, _)| s.name == name) else {
                return Err(KnobError(format!(
                    "unknown knob {name}: accepted are {}",
                    all.iter()
                        .map(|(s, _)| s.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            };
            let names: Vec<&str> = families.iter().map(|p| p.name()).collect();
            return Err(KnobError(format!(
                "{}={} needs --protocol {}, not {} (its knobs: {})",
                spec.flag(),
                text.trim(),
                names.join(" or "),
                self.name(),
                self.knobs_named()
            )));
        }
        struct Configure<'k>(&'k Knobs);
        impl ProtocolVisitor for Configure<'_> {
            type Out = Result<Arc<dyn FamilyConfig>, KnobError>;
            fn visit<P: Protocol>(self) -> Self::Out {
                P::configure(self.0)
            }
        }
        let knobs = Knobs::resolve(self.knobs(), given)?;
        let family = self.dispatch(Configure(&knobs))?;
        Ok((knobs, family))
    }

    /// The node roles the family declares ([`Protocol::ROLES`]).
    pub fn roles(self) -> &'static [RoleSpec] {
        struct Roles;
        impl ProtocolVisitor for Roles {
            type Out = &'static [RoleSpec];
            fn visit<P: Protocol>(self) -> Self::Out {
                P::ROLES
            }
        }
        self.dispatch(Roles)
    }

    /// Every node role some family declares, once, with the families declaring it (in
    /// registration order): the `--NAME-node` settings the CLI and config file accept.
    pub fn all_roles() -> Vec<(RoleSpec, Vec<ProtocolKind>)> {
        declared_by_families(Self::roles, |r| r.name, "role")
    }

    /// Where each of the family's roles runs, from `given` (role name, `memory|own`); a role
    /// not given runs on node 0. A role of another family, or a placement not accepted, is
    /// refused naming what is.
    pub fn place_roles<'a>(
        self,
        given: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Vec<(RoleSpec, Placement)>, KnobError> {
        let mut placed: Vec<(RoleSpec, Placement)> = self
            .roles()
            .iter()
            .map(|&r| (r, Placement::Memory))
            .collect();
        for (name, text) in given {
            let Some(slot) = placed.iter_mut().find(|(r, _)| r.name == name) else {
                let all = Self::all_roles();
                let owners = all
                    .iter()
                    .find(|(r, _)| r.name == name)
                    .map(|(_, families)| {
                        families
                            .iter()
                            .map(|p| p.name())
                            .collect::<Vec<_>>()
                            .join(" or ")
                    });
                let flag = format!("--{}-node", name.replace('_', "-"));
                return Err(KnobError(match owners {
                    Some(owners) => format!(
                        "{flag} {} needs --protocol {owners}, not {} (its roles: {})",
                        text.trim(),
                        self.name(),
                        self.roles_named()
                    ),
                    None => format!(
                        "unknown node role {name}: accepted are {}",
                        all.iter()
                            .map(|(r, _)| r.name)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                }));
            };
            slot.1 = Placement::parse(text.trim()).ok_or_else(|| {
                KnobError(format!(
                    "unknown {} '{}': accepted are {}",
                    slot.0.flag(),
                    text.trim(),
                    Placement::accepted()
                ))
            })?;
        }
        Ok(placed)
    }

    /// `placed` with each role as many times as it runs: once, or as many as its count knob
    /// says in `knobs` (name, text; any other knob is left for the family's configuration
    /// to judge). A role on memory nodes runs its `i`th instance on memory node `i`, so it
    /// needs as many of them as `memory_nodes`.
    pub fn role_instances<'a>(
        self,
        placed: Vec<(RoleSpec, Placement)>,
        knobs: impl IntoIterator<Item = (&'a str, &'a str)>,
        memory_nodes: u16,
    ) -> Result<Vec<(RoleSpec, Placement)>, KnobError> {
        let counts: Vec<&str> = placed.iter().filter_map(|(r, _)| r.count_knob).collect();
        let knobs = Knobs::resolve(
            self.knobs(),
            knobs.into_iter().filter(|(k, _)| counts.contains(k)),
        )?;
        let mut out = Vec::new();
        for (role, placement) in placed {
            let count = role.count_knob.map_or(1, |k| knobs.number(k));
            if placement == Placement::Memory && count > memory_nodes as u64 {
                let knob = role.count_knob.unwrap_or("").replace('_', "-");
                return Err(KnobError(format!(
                    "--{knob} {count} with {} memory: each {} runs on a memory node of its own, and there are {memory_nodes} (expected --{knob} at most {memory_nodes}, more memory nodes, or {} own)",
                    role.flag(),
                    role.what,
                    role.flag()
                )));
            }
            out.extend(std::iter::repeat_n((role, placement), count as usize));
        }
        Ok(out)
    }

    /// The family's roles as flags, or `none`.
    fn roles_named(self) -> String {
        if self.roles().is_empty() {
            return "none".into();
        }
        self.roles()
            .iter()
            .map(|r| r.flag())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The family's knobs as flags, or `none`.
    fn knobs_named(self) -> String {
        if self.knobs().is_empty() {
            return "none".into();
        }
        self.knobs()
            .iter()
            .map(|s| format!("--{}", s.flag()))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The isolation level the protocol guarantees.
    pub fn isolation(self) -> atoll_txn::Isolation {
        struct Iso;
        impl ProtocolVisitor for Iso {
            type Out = atoll_txn::Isolation;
            fn visit<P: Protocol>(self) -> Self::Out {
                P::ISOLATION
            }
        }
        self.dispatch(Iso)
    }

    /// The aborts its conflicts end in under contention ([`Protocol::CONFLICT_ABORTS`]).
    pub fn conflict_aborts(self) -> &'static [atoll_txn::Abort] {
        struct Conflicts;
        impl ProtocolVisitor for Conflicts {
            type Out = &'static [atoll_txn::Abort];
            fn visit<P: Protocol>(self) -> Self::Out {
                P::CONFLICT_ABORTS
            }
        }
        self.dispatch(Conflicts)
    }

    /// Whether it can delete records.
    pub fn deletes(self) -> bool {
        struct Del;
        impl ProtocolVisitor for Del {
            type Out = bool;
            fn visit<P: Protocol>(self) -> Self::Out {
                P::DELETES
            }
        }
        self.dispatch(Del)
    }

    /// [`Protocol::LOGS_ITS_INSTALLS`].
    pub fn logs_its_installs(self) -> bool {
        struct Logs;
        impl ProtocolVisitor for Logs {
            type Out = bool;
            fn visit<P: Protocol>(self) -> Self::Out {
                P::LOGS_ITS_INSTALLS
            }
        }
        self.dispatch(Logs)
    }

    /// [`Protocol::SEQUENCED`]: a deterministic protocol, run by sequenced lanes.
    pub fn sequenced(self) -> bool {
        struct Seq;
        impl ProtocolVisitor for Seq {
            type Out = bool;
            fn visit<P: Protocol>(self) -> Self::Out {
                P::SEQUENCED
            }
        }
        self.dispatch(Seq)
    }

    /// [`Protocol::RECOVERS_COMPUTE_NODES`], and if so why this run could not recover one
    /// ([`Protocol::recovery_refusal`]): `None` if the protocol recovers none.
    pub fn recovery(self, plan: &atoll_txn::Plan, log_replicas: u16) -> Option<Result<(), String>> {
        struct Rec<'a>(&'a atoll_txn::Plan, u16);
        impl ProtocolVisitor for Rec<'_> {
            type Out = Option<Result<(), String>>;
            fn visit<P: Protocol>(self) -> Self::Out {
                P::RECOVERS_COMPUTE_NODES
                    .then(|| P::recovery_refusal(self.0, self.1).map_or(Ok(()), Err))
            }
        }
        self.dispatch(Rec(plan, log_replicas))
    }

    /// Rejects a plan the protocol cannot run.
    pub fn check_plan(self, plan: &atoll_txn::Plan) -> Result<(), atoll_txn::PlanError> {
        struct Check<'a>(&'a atoll_txn::Plan);
        impl ProtocolVisitor for Check<'_> {
            type Out = Result<(), atoll_txn::PlanError>;
            fn visit<P: Protocol>(self) -> Self::Out {
                atoll_txn::check_plan::<P>(self.0)
            }
        }
        self.dispatch(Check(plan))
    }
}

/// Every declaration (`what`: a knob, a role) some family makes, once by `name`, with the
/// families making it in registration order; two families declaring one name declare it
/// alike (one constant both list).
fn declared_by_families<T: Copy + PartialEq + std::fmt::Debug + 'static>(
    of: fn(ProtocolKind) -> &'static [T],
    name: fn(&T) -> &'static str,
    what: &str,
) -> Vec<(T, Vec<ProtocolKind>)> {
    let mut all: Vec<(T, Vec<ProtocolKind>)> = Vec::new();
    for p in ProtocolKind::ALL {
        for d in of(p) {
            match all.iter_mut().find(|(x, _)| name(x) == name(d)) {
                Some((x, families)) => {
                    assert_eq!(x, d, "{what} {} declared twice, differently", name(x));
                    families.push(p);
                }
                None => all.push((*d, vec![p])),
            }
        }
    }
    all
}

/// Work done with a protocol's type, chosen at run time ([`ProtocolKind::dispatch`]).
pub trait ProtocolVisitor {
    type Out;
    fn visit<P: Protocol>(self) -> Self::Out;
}

#[cfg(test)]
mod tests {
    use super::*;
    use atoll_txn::Stage;

    #[test]
    fn families_configure_from_their_default_knobs() {
        for p in ProtocolKind::ALL {
            let (knobs, family) = p
                .configure(std::iter::empty())
                .unwrap_or_else(|e| panic!("{}: {e}", p.name()));
            assert_eq!(knobs.iter().count(), p.knobs().len(), "{}", p.name());
            assert!(family.version_slots() >= 1, "{}", p.name());
        }
    }

    #[test]
    fn a_knob_of_another_family_is_refused_naming_the_families_that_declare_it() {
        let e = ProtocolKind::Occ
            .configure([("rsi_versions", "2")])
            .unwrap_err();
        assert_eq!(
            e.0,
            "rsi-versions=2 needs --protocol rsi or namdb, not occ (its knobs: none)"
        );
        let e = ProtocolKind::Mvcc.configure([("speed", "2")]).unwrap_err();
        assert!(e.0.starts_with("unknown knob speed: accepted are "), "{e}");
    }

    #[test]
    fn a_node_role_is_its_familys_placed_on_node_0_unless_given_and_refused_elsewhere() {
        let ts = atoll_txn::tsvc::TS_ROLE;
        assert_eq!(
            ProtocolKind::all_roles(),
            vec![
                (ts, vec![ProtocolKind::Rsi, ProtocolKind::NamDb]),
                (tell::node::CM_ROLE, vec![ProtocolKind::Tell])
            ]
        );
        assert_eq!(
            ProtocolKind::Tell.place_roles([("cm", "own")]).unwrap(),
            vec![(tell::node::CM_ROLE, Placement::Own)]
        );
        assert_eq!(
            ProtocolKind::Rsi.place_roles([]).unwrap(),
            vec![(ts, Placement::Memory)]
        );
        assert_eq!(
            ProtocolKind::NamDb.place_roles([("ts", "own")]).unwrap(),
            vec![(ts, Placement::Own)]
        );
        assert_eq!(ProtocolKind::Occ.place_roles([]).unwrap(), vec![]);
        for (p, given, error) in [
            (
                ProtocolKind::Mvcc,
                ("ts", "own"),
                "--ts-node own needs --protocol rsi or namdb, not mvcc (its roles: none)",
            ),
            (
                ProtocolKind::Rsi,
                ("ts", "far"),
                "unknown --ts-node 'far': accepted are memory, own",
            ),
            (
                ProtocolKind::Rsi,
                ("cm", "own"),
                "--cm-node own needs --protocol tell, not rsi (its roles: --ts-node)",
            ),
            (
                ProtocolKind::Rsi,
                ("sequencer", "own"),
                "unknown node role sequencer: accepted are ts, cm",
            ),
            (
                ProtocolKind::Occ,
                ("cm", "own"),
                "--cm-node own needs --protocol tell, not occ (its roles: none)",
            ),
        ] {
            assert_eq!(p.place_roles([given]).unwrap_err().0, error);
        }
    }

    #[test]
    fn a_knob_shared_by_families_is_declared_the_same_by_each() {
        // `all_knobs` asserts two declarations of one name are equal.
        let all = ProtocolKind::all_knobs();
        let (_, families) = all
            .iter()
            .find(|(s, _)| s.name == "rsi_versions")
            .expect("RSI's versions are a knob");
        assert_eq!(families, &[ProtocolKind::Rsi, ProtocolKind::NamDb]);
    }

    #[test]
    fn family_stages_are_their_own_and_used() {
        for p in ProtocolKind::ALL {
            for (i, s) in p.family_stages().iter().enumerate() {
                assert!(
                    s.is_family(),
                    "{}: {} is a common stage",
                    p.name(),
                    s.name()
                );
                assert!(
                    Stage::COMMON.iter().all(|c| c.name() != s.name()),
                    "{}: stage {} shadows a common one",
                    p.name(),
                    s.name()
                );
                assert!(
                    p.family_stages()[..i]
                        .iter()
                        .all(|o| o.index() != s.index()),
                    "{}: two stages in slot {}",
                    p.name(),
                    s.index()
                );
                assert!(
                    p.stages().contains(s) != p.cpu_stages().contains(s),
                    "{}: {} unused, or both planned and always a request",
                    p.name(),
                    s.name()
                );
            }
        }
    }

    #[test]
    fn a_plan_names_its_familys_stages_and_refuses_another_familys() {
        let plan = ProtocolKind::Rsi
            .parse_plan("read=rpc,timestamp=rpc")
            .unwrap();
        assert_eq!(plan.get(rsi::TIMESTAMP), atoll_txn::Primitive::Rpc);
        assert_eq!(
            plan.to_string(),
            "read=rpc,lock=one-sided,validate=one-sided,log=one-sided,commit=one-sided,\
             release=one-sided,renew=one-sided,timestamp=rpc"
        );
        let e = ProtocolKind::Occ.parse_plan("timestamp=rpc").unwrap_err();
        assert!(
            e.0.starts_with("stage timestamp set to rpc, but the protocol has no such stage"),
            "{e}"
        );
        let e = ProtocolKind::Occ.parse_plan("locking=rpc").unwrap_err();
        assert!(e.0.starts_with("unknown stage 'locking'"), "{e}");
    }
}
