//! Run-time stage plans: which primitive (one-sided verbs or RPC) each commit stage uses.
//! Parsed and validated once at start-up; protocols read it, never a compile-time switch.

use std::fmt;

pub use atoll_history::Isolation;

/// The stages of a transaction whose primitive a plan chooses (RCC Figure 13).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Stage {
    Read,
    Lock,
    Validate,
    Log,
    Commit,
    Release,
    Renew,
    /// The snapshot-isolation family's requests to its timestamp service (read timestamp,
    /// commit timestamp, outcome).
    Timestamp,
}

impl Stage {
    pub const ALL: [Stage; 8] = [
        Stage::Read,
        Stage::Lock,
        Stage::Validate,
        Stage::Log,
        Stage::Commit,
        Stage::Release,
        Stage::Renew,
        Stage::Timestamp,
    ];
    pub const COUNT: usize = Self::ALL.len();

    pub fn name(self) -> &'static str {
        match self {
            Stage::Read => "read",
            Stage::Lock => "lock",
            Stage::Validate => "validate",
            Stage::Log => "log",
            Stage::Commit => "commit",
            Stage::Release => "release",
            Stage::Renew => "renew",
            Stage::Timestamp => "timestamp",
        }
    }

    pub fn parse(s: &str) -> Option<Stage> {
        Stage::ALL.into_iter().find(|st| st.name() == s)
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

/// A primitive per stage.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Plan {
    prims: [Primitive; Stage::COUNT],
}

/// A plan that cannot be parsed or that a protocol cannot run.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct PlanError(pub String);

impl Plan {
    pub const fn uniform(p: Primitive) -> Plan {
        Plan {
            prims: [p; Stage::COUNT],
        }
    }

    #[inline]
    pub fn get(&self, s: Stage) -> Primitive {
        self.prims[s as usize]
    }

    pub fn with(mut self, s: Stage, p: Primitive) -> Plan {
        self.prims[s as usize] = p;
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
        for s in Stage::ALL {
            if !used.contains(&s) {
                plan.prims[s as usize] = Primitive::OneSided;
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
        let unused: Vec<&str> = Stage::ALL
            .into_iter()
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

    /// Parses `one-sided`, `rpc`, or a per-stage list `read=rpc,lock=one-sided,...` where
    /// unnamed stages default to one-sided.
    pub fn parse(s: &str) -> Result<Plan, PlanError> {
        let s = s.trim();
        if let Some(p) = Primitive::parse(s) {
            return Ok(Plan::uniform(p));
        }
        if !s.contains('=') {
            return Err(PlanError(format!(
                "unknown plan '{s}': expected 'one-sided', 'rpc', or per-stage 'STAGE=PRIM,...' \
                 (stages: read, lock, validate, log, commit, release, renew, timestamp; prims: one-sided, rpc)"
            )));
        }
        let mut plan = Plan::uniform(Primitive::OneSided);
        let mut seen = [false; Stage::COUNT];
        for part in s.split(',') {
            let (st, pr) = part.split_once('=').ok_or_else(|| {
                PlanError(format!(
                    "plan entry '{part}' is not STAGE=PRIM (for example lock=one-sided)"
                ))
            })?;
            let stage = Stage::parse(st.trim()).ok_or_else(|| {
                PlanError(format!(
                    "unknown stage '{}' in plan: accepted stages are read, lock, validate, log, commit, release, renew, timestamp",
                    st.trim()
                ))
            })?;
            let prim = Primitive::parse(pr.trim()).ok_or_else(|| {
                PlanError(format!(
                    "unknown primitive '{}' for stage {}: accepted are one-sided, rpc",
                    pr.trim(),
                    stage.name()
                ))
            })?;
            if std::mem::replace(&mut seen[stage as usize], true) {
                return Err(PlanError(format!(
                    "stage {} given twice in plan '{s}'",
                    stage.name()
                )));
            }
            plan.prims[stage as usize] = prim;
        }
        Ok(plan)
    }
}

impl fmt::Display for Plan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_uniform() {
            return f.write_str(self.prims[0].name());
        }
        for (i, s) in Stage::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}={}", s.name(), self.prims[i].name())?;
        }
        Ok(())
    }
}
