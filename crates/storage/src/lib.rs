//! Atoll storage: tables of fixed-size records in registered regions.
//!
//! [`layout`] defines the tuple header and where every word lives; [`store`] is one node's
//! share (inserts, deletes, lookups); [`slots`] a multi-version record's old slots;
//! [`ordered`] is the per-node B+tree for range scans;
//! [`topology`] says which nodes hold records, which run coordinators and which serve a
//! family's roles.
//! Storage knows no backend: it sees only [`atoll_fabric::NodeMemory`] and pointers.

pub mod budget;
pub mod instance_log;
pub mod layout;
pub mod ordered;
pub mod slots;
pub mod store;
pub mod topology;

pub use budget::{MemoryBudget, Refusal};
pub use instance_log::{InstanceLog, InstanceLogCounts, InstanceLogError};
pub use layout::{Catalog, ExtraRegion, Partition, TableId, TableLayout, TableSlots, TableSpec};
pub use store::{Store, StoreError, GONE_BYTES_PER_KEY_MAX};
pub use topology::{Architecture, Homes, Placement, RoleSpec, Topology, SERVICES_MAX};
