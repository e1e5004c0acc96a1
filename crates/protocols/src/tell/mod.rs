//! Tell (Loesing et al., SIGMOD 2015; `../shared/papers/tell-shared-data-sigmod15.txt`): the
//! shared-data design whose store offers only an atomic get and a conditional put (LL/SC)
//! and whose snapshot isolation comes from commit managers. Processing nodes run whole
//! transactions: a transaction starts at a commit manager ([`cm`]) with a tid and a snapshot
//! descriptor ([`descriptor`]), reads every version of a record and picks the newest its
//! snapshot sees ([`versions`]), buffers its updates, and commits by a log entry, a
//! conditional put of each updated record, the index updates, the log's commit flag and
//! `set_committed`.
//!
//! Built: the commit manager (one or several, merging), the descriptor, the version set's
//! rules (the read, R1, the write and its undo, garbage collection by `lav`) and the
//! latch-free B+tree over any LL/SC store ([`btree`]); the commit manager's messages
//! ([`msg`]) and the node state that serves them ([`node`]); a record's versions in its
//! slot's words ([`record`]); the shared record buffer of SB and SBVS ([`buffer`]); the
//! log and the recovery plan of a crashed processing node ([`recovery`]); the participant
//! serving `get`, `put_if` and the commit manager's requests ([`participant`]), and their
//! one-sided form on a processing node ([`store`]); the management role that finds a
//! crashed processing node and recovers it ([`manager`]); and `--protocol tell` ([`txn`]).
//! SBVS's cache-unit stamps in the store ([`sbvs`]); the B+tree's nodes in a storage node's
//! region, reached by one-sided verbs ([`tree_store`]), and, with `--tell-index btree`,
//! the index Tell's transactions find records by ([`index`]).

pub mod btree;
pub mod buffer;
pub mod cm;
pub mod config;
pub mod descriptor;
pub mod index;
pub mod manager;
pub mod msg;
pub mod node;
pub mod participant;
pub mod record;
pub mod recovery;
pub mod sbvs;
pub mod store;
pub mod sync;
pub mod tree_store;
pub mod txn;
pub mod versions;

pub use txn::Tell;
