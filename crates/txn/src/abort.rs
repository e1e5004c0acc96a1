//! Typed abort reasons: expected failures, counted per reason, never panics.

/// Why a transaction attempt aborted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Abort {
    /// A lock it needed was held by another transaction (NOWAIT, OCC's commit-time locks).
    LockBusy,
    /// A version it read changed before commit (OCC validation).
    ValidationFailed,
    /// It read a record that a committing writer held locked.
    Conflict,
    /// The transaction logic chose to abort (insufficient funds, TPC-C's invalid item).
    UserAbort,
    /// A key it needed does not exist.
    NotFound,
    /// An insert found the key already present.
    Duplicate,
    /// MVCC: no kept version is old enough for the reader (all slots overwritten).
    SlotOverflow,
    /// An insert found every record slot of its table on the owning node used.
    TableFull,
    /// An op to a node failed (unreachable, timed out) before the attempt's log was written.
    NodeFailed,
    /// Snapshot isolation: a record's newest version kept is newer than the attempt's
    /// snapshot (RSI keeps one version per record, as the paper's implementation: "aborts all
    /// transactions which require an older snapshot").
    SnapshotTooOld,
    /// A deterministic protocol (CALVIN): the transaction touched a record its declared set
    /// (a reconnaissance read's, Calvin's OLLP) did not name, because what it read changed
    /// since; every node executing it finds the same, and it is sequenced again.
    KeysChanged,
    /// A backup's log ring stayed full (its log cleaner applied none of the coordinator's
    /// records while the attempt waited for room, [`crate::log_ring`]): back-pressure, nothing
    /// logged, the attempt retried.
    LogFull,
    /// A transaction that wrote nothing finished after its node's lease ended: the node may
    /// have been declared dead (it froze) and recovered without it, so what it read may be
    /// stale ([`crate::recovery::Membership::lease_holds`]).
    LeaseExpired,
}

impl Abort {
    pub const ALL: [Abort; 13] = [
        Abort::LockBusy,
        Abort::ValidationFailed,
        Abort::Conflict,
        Abort::UserAbort,
        Abort::NotFound,
        Abort::Duplicate,
        Abort::SlotOverflow,
        Abort::TableFull,
        Abort::NodeFailed,
        Abort::SnapshotTooOld,
        Abort::KeysChanged,
        Abort::LogFull,
        Abort::LeaseExpired,
    ];
    pub const COUNT: usize = Self::ALL.len();

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Abort::LockBusy => "lock_busy",
            Abort::ValidationFailed => "validation_failed",
            Abort::Conflict => "conflict",
            Abort::UserAbort => "user_abort",
            Abort::NotFound => "not_found",
            Abort::Duplicate => "duplicate",
            Abort::SlotOverflow => "slot_overflow",
            Abort::TableFull => "table_full",
            Abort::NodeFailed => "node_failed",
            Abort::SnapshotTooOld => "snapshot_too_old",
            Abort::KeysChanged => "keys_changed",
            Abort::LogFull => "log_full",
            Abort::LeaseExpired => "lease_expired",
        }
    }

    /// Whether re-running the same transaction logic can succeed. A user abort is the
    /// transaction's own decision, so it is final; slots of a full table are never freed
    /// (deleted slots are not reused), so it stays full; a failed node stays failed until
    /// recovery (a later issue) brings it back.
    pub fn is_retryable(self) -> bool {
        !matches!(
            self,
            Abort::UserAbort | Abort::NotFound | Abort::TableFull | Abort::NodeFailed
        )
    }
}

impl std::fmt::Display for Abort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
