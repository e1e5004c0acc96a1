//! Atoll's concurrency-control protocols, one module per family, each composing the shared
//! stage building blocks of `atoll_txn::stages` with its own, with the primitive its
//! run-time plan names. A family with requests of its own (WAITDIE, SUNDIAL, MVCC) has a
//! coordinator side, a participant side and its messages in its module, and registers its
//! participant in [`participants`].

use atoll_txn::handler::Participant;
use std::sync::Arc;

pub mod mvcc;
pub mod nowait;
pub mod occ;
pub mod sundial;
pub mod waitdie;

pub use mvcc::Mvcc;
pub use nowait::NoWait;
pub use occ::Occ;
pub use sundial::Sundial;
pub use waitdie::WaitDie;

/// Every family's participant side, one per node: the registration list.
pub fn participants() -> Vec<Arc<dyn Participant>> {
    vec![
        Arc::new(waitdie::WaitDieParticipant::default()),
        Arc::new(sundial::SundialParticipant),
        Arc::new(mvcc::MvccParticipant),
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
}

impl ProtocolKind {
    pub const ALL: [ProtocolKind; 5] = [
        ProtocolKind::NoWait,
        ProtocolKind::WaitDie,
        ProtocolKind::Occ,
        ProtocolKind::Mvcc,
        ProtocolKind::Sundial,
    ];

    pub fn name(self) -> &'static str {
        use atoll_txn::Protocol;
        match self {
            ProtocolKind::NoWait => NoWait::NAME,
            ProtocolKind::WaitDie => WaitDie::NAME,
            ProtocolKind::Sundial => Sundial::NAME,
            ProtocolKind::Mvcc => Mvcc::NAME,
            ProtocolKind::Occ => Occ::NAME,
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
        use atoll_txn::Protocol;
        match self {
            ProtocolKind::NoWait => NoWait::STAGES,
            ProtocolKind::WaitDie => WaitDie::STAGES,
            ProtocolKind::Occ => Occ::STAGES,
            ProtocolKind::Mvcc => Mvcc::STAGES,
            ProtocolKind::Sundial => Sundial::STAGES,
        }
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

    /// Rejects a plan the protocol cannot run.
    pub fn check_plan(self, plan: &atoll_txn::Plan) -> Result<(), atoll_txn::PlanError> {
        use atoll_txn::Protocol;
        match self {
            ProtocolKind::NoWait => NoWait::check_plan(plan),
            ProtocolKind::WaitDie => WaitDie::check_plan(plan),
            ProtocolKind::Sundial => Sundial::check_plan(plan),
            ProtocolKind::Mvcc => Mvcc::check_plan(plan),
            ProtocolKind::Occ => Occ::check_plan(plan),
        }
    }
}
