//! Atoll's concurrency-control protocols, one module per family, each composing the shared
//! stage building blocks of `atoll_txn::stages` with its own, with the primitive its
//! run-time plan names. A family with requests of its own (WAITDIE, SUNDIAL, MVCC) has a
//! coordinator side, a participant side and its messages in its module, and registers its
//! participant in [`participants`].

use atoll_txn::handler::Participant;
use atoll_txn::Protocol;
use std::sync::Arc;

pub mod mvcc;
pub mod namdb;
pub mod nowait;
pub mod occ;
pub mod rsi;
pub mod sundial;
pub mod waitdie;

pub use mvcc::Mvcc;
pub use namdb::NamDb;
pub use nowait::NoWait;
pub use occ::Occ;
pub use rsi::Rsi;
pub use sundial::Sundial;
pub use waitdie::WaitDie;

/// Every family's participant side, one per node: the registration list.
pub fn participants() -> Vec<Arc<dyn Participant>> {
    vec![
        Arc::new(waitdie::WaitDieParticipant::default()),
        Arc::new(sundial::SundialParticipant),
        Arc::new(mvcc::MvccParticipant),
        Arc::new(rsi::participant::RsiParticipant),
    ]
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
}

impl ProtocolKind {
    pub const ALL: [ProtocolKind; 7] = [
        ProtocolKind::NoWait,
        ProtocolKind::WaitDie,
        ProtocolKind::Occ,
        ProtocolKind::Mvcc,
        ProtocolKind::Sundial,
        ProtocolKind::Rsi,
        ProtocolKind::NamDb,
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

    /// Every valid plan of the protocol: each combination of primitives over the stages it
    /// uses (the rest one-sided), minus those `check_plan` rejects (RCC §5.1's exhaustive
    /// search).
    pub fn all_plans(self) -> Vec<atoll_txn::Plan> {
        use atoll_txn::{Plan, Primitive};
        let stages = self.stages();
        (0u32..1 << stages.len())
            .map(|bits| {
                stages
                    .iter()
                    .enumerate()
                    .fold(Plan::uniform(Primitive::OneSided), |p, (i, s)| {
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

/// Work done with a protocol's type, chosen at run time ([`ProtocolKind::dispatch`]).
pub trait ProtocolVisitor {
    type Out;
    fn visit<P: Protocol>(self) -> Self::Out;
}
