//! Run-time stage plans: which primitive (one-sided verbs or RPC) each commit stage uses.
//! Parsed and validated once at start-up; protocols read it, never a compile-time switch.

use std::fmt;

pub use atoll_history::Isolation;

/// A stage of a transaction whose primitive a plan chooses: one of the common stages any
/// family may use (RCC Figure 13), or one a family declares of its own
/// ([`crate::Protocol::FAMILY_STAGES`], made with [`Stage::family`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stage {
    index: u8,
    name: &'static str,
}

#[allow(non_upper_case_globals)]
impl Stage {
    pub const Read: Stage = Stage::common(0, "read");
    pub const Lock: Stage = Stage::common(1, "lock");
    pub const Validate: Stage = Stage::common(2, "validate");
    pub const Log: Stage = Stage::common(3, "log");
    pub const Commit: Stage = Stage::common(4, "commit");
    pub const Release: Stage = Stage::common(5, "release");
    pub const Renew: Stage = Stage::common(6, "renew");

    /// The stages every family may use, in the order plans and reports list them.
    pub const COMMON: [Stage; 7] = [
        Stage::Read,
        Stage::Lock,
        Stage::Validate,
        Stage::Log,
        Stage::Commit,
        Stage::Release,
        Stage::Renew,
    ];
    /// Stages one family may declare of its own, at most.
    pub const FAMILY_MAX: usize = 4;
    /// Slots of a plan and of a per-stage breakdown: the common stages, then a family's.
    pub const COUNT: usize = Self::COMMON.len() + Self::FAMILY_MAX;

    const fn common(index: u8, name: &'static str) -> Stage {
        Stage { index, name }
    }

    /// A family's own stage number `i` (below [`Stage::FAMILY_MAX`]), called `name` in
    /// plans and reports.
    pub const fn family(i: usize, name: &'static str) -> Stage {
        assert!(
            i < Self::FAMILY_MAX,
            "a family declares at most FAMILY_MAX stages"
        );
        Stage {
            index: (Self::COMMON.len() + i) as u8,
            name,
        }
    }

    /// Its slot in a plan or a per-stage breakdown (`0..COUNT`).
    #[inline]
    pub fn index(self) -> usize {
        self.index as usize
    }

    pub fn name(self) -> &'static str {
        self.name
    }

    /// Whether it is one of a family's own.
    pub fn is_family(self) -> bool {
        self.index() >= Self::COMMON.len()
    }
}

/// How one stage talks to a remote node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Primitive {
    OneSided,
    Rpc,
}

impl Primitive {
    pub fn name(self) -> &'static str {
        match self {
            Primitive::OneSided => "one-sided",
            Primitive::Rpc => "rpc",
        }
    }

    pub fn parse(s: &str) -> Option<Primitive> {
        match s {
            "one-sided" | "onesided" | "1s" => Some(Primitive::OneSided),
            "rpc" => Some(Primitive::Rpc),
            _ => None,
        }
    }
}

/// A primitive per stage: the common stages' and, when it was made for a family
/// ([`Plan::parse_for`], [`Plan::for_family`]), that family's own.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Plan {
    prims: [Primitive; Stage::COUNT],
    /// The family's own stages the plan names.
    family: &'static [Stage],
}

/// A plan that cannot be parsed or that a protocol cannot run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

impl Plan {
    pub const fn uniform(p: Primitive) -> Plan {
        Plan {
            prims: [p; Stage::COUNT],
            family: &[],
        }
    }

    /// The plan, naming `family`'s own stages too (their primitives unchanged).
    pub fn for_family(mut self, family: &'static [Stage]) -> Plan {
        self.family = family;
        self
    }

    /// The stages it names: the common ones, then its family's.
    pub fn stages(&self) -> impl Iterator<Item = Stage> + '_ {
        Stage::COMMON.into_iter().chain(self.family.iter().copied())
    }

    #[inline]
    pub fn get(&self, s: Stage) -> Primitive {
        self.prims[s.index()]
    }

    pub fn with(mut self, s: Stage, p: Primitive) -> Plan {
        debug_assert!(
            !s.is_family() || self.family.contains(&s),
            "stage {} is not among the plan's family stages {:?}",
            s.name(),
            self.family
        );
        self.prims[s.index()] = p;
        self
    }

    /// Whether every stage has the same primitive (`one-sided` or `rpc`).
    pub fn is_uniform(&self) -> bool {
        self.prims.iter().all(|p| *p == self.prims[0])
    }

    /// The plan with every stage outside `used` set to one-sided, unless it is uniform: what a
    /// per-stage plan means to a protocol that uses only `used`.
    pub fn only(&self, used: &[Stage]) -> Plan {
        if self.is_uniform() {
            return *self;
        }
        let mut plan = *self;
        for s in self.stages() {
            if !used.contains(&s) {
                plan.prims[s.index()] = Primitive::OneSided;
            }
        }
        plan
    }

    /// Refuses a per-stage plan that puts RPC on a stage outside `used`: such a choice would be
    /// accepted and silently ignored. A uniform plan is accepted, since it names no stage.
    pub fn check_stages(&self, used: &[Stage]) -> Result<(), PlanError> {
        if self.is_uniform() {
            return Ok(());
        }
        let unused: Vec<&str> = self
            .stages()
            .filter(|s| !used.contains(s) && self.get(*s) != Primitive::OneSided)
            .map(|s| s.name())
            .collect();
        if unused.is_empty() {
            return Ok(());
        }
        let names: Vec<&str> = used.iter().map(|s| s.name()).collect();
        Err(PlanError(format!(
            "stage {} set to rpc, but the protocol has no such stage: it uses {}",
            unused.join(", "),
            names.join(", ")
        )))
    }

    /// Parses `one-sided`, `rpc`, or a per-stage list `read=rpc,lock=one-sided,...` of the
    /// common stages, where unnamed stages default to one-sided.
    pub fn parse(s: &str) -> Result<Plan, PlanError> {
        Self::parse_for(s, &[])
    }

    /// As [`Plan::parse`], also naming `family`'s own stages.
    pub fn parse_for(s: &str, family: &'static [Stage]) -> Result<Plan, PlanError> {
        let s = s.trim();
        let names = || {
            Stage::COMMON
                .iter()
                .chain(family)
                .map(|st| st.name())
                .collect::<Vec<_>>()
                .join(", ")
        };
        if let Some(p) = Primitive::parse(s) {
            return Ok(Plan::uniform(p).for_family(family));
        }
        if !s.contains('=') {
            return Err(PlanError(format!(
                "unknown plan '{s}': expected 'one-sided', 'rpc', or per-stage 'STAGE=PRIM,...' \
                 (stages: {}; prims: one-sided, rpc)",
                names()
            )));
        }
        let mut plan = Plan::uniform(Primitive::OneSided).for_family(family);
        let mut seen = [false; Stage::COUNT];
        for part in s.split(',') {
            let (st, pr) = part.split_once('=').ok_or_else(|| {
                PlanError(format!(
                    "plan entry '{part}' is not STAGE=PRIM (for example lock=one-sided)"
                ))
            })?;
            let stage = plan
                .stages()
                .find(|x| x.name() == st.trim())
                .ok_or_else(|| {
                    PlanError(format!(
                        "unknown stage '{}' in plan: accepted stages are {}{}",
                        st.trim(),
                        names(),
                        atoll_fabric::names::did_you_mean(st, plan.stages().map(|x| x.name()))
                    ))
                })?;
            let prim = Primitive::parse(pr.trim()).ok_or_else(|| {
                PlanError(format!(
                    "unknown primitive '{}' for stage {}: accepted are one-sided, rpc{}",
                    pr.trim(),
                    stage.name(),
                    atoll_fabric::names::did_you_mean(pr, ["one-sided", "rpc"])
                ))
            })?;
            if std::mem::replace(&mut seen[stage.index()], true) {
                return Err(PlanError(format!(
                    "stage {} given twice in plan '{s}'",
                    stage.name()
                )));
            }
            plan.prims[stage.index()] = prim;
        }
        Ok(plan)
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_uniform() {
            return f.write_str(self.prims[0].name());
        }
        for (i, s) in self.stages().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}={}", s.name(), self.get(s).name())?;
        }
        Ok(())
    }
}
