//! Tell's latch-free B+tree (Tell §5.3): every node is one key-value pair of the store,
//! changed only by a conditional put (LL/SC), so no reader or writer ever takes a latch.
//! Processing nodes cache inner nodes; leaves are always fetched. Entries are
//! version-unaware (`key -> rid`), written only when a key comes or goes.
//!
//! A node split is two steps, each one conditional put: the new right node is put first
//! (`put_if_absent`), then the old node shrinks to the lower half with the split key as its
//! high bound and a link to the new node (Lehman and Yao's B-link). Until the separator
//! reaches the parent (a third conditional put, retried), a search that lands on the old
//! node for a key at or above its high bound follows the link, and so does a writer looking
//! for the parent of a split. A node never merges and never moves left, so a search that
//! meets a node whose low bound is above its key knows its cached path is stale and starts
//! again from the root, refetched. The root is named by a record of its own at
//! [`ROOT_RID`], changed by a conditional put when the root splits.
//!
//! Node words: `[level, low, high, right, n, keys[n], values[n or n + 1]]`; a leaf (level 0)
//! holds rids, an inner node its `n + 1` children one level down, child `i` covering
//! `[keys[i - 1], keys[i])` within `[low, high)`. Keys are below [`KEY_MAX`].
//!
//! A right node whose split lost its race (the old node changed before it shrank) is never
//! linked: no search reaches it, and it is counted in [`Tree::orphans`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// A record id in the store.
pub type Rid = u64;

/// The record naming the root: `[root rid, its level]` (0: the root is a leaf).
pub const ROOT_RID: Rid = 1;
/// The high bound of the rightmost node of each level: above every key.
pub const KEY_MAX: u64 = u64::MAX;
/// Fewest entries a node holds before it splits.
pub const FANOUT_MIN: usize = 3;

/// Attempts of one operation before it gives up: each failed one means another writer's
/// put succeeded, so only a run with unbounded contention reaches it.
pub const ATTEMPTS_MAX: u32 = 10_000;

/// Levels at most: a tree of fanout 3 this tall holds more keys than a u64 counts.
const LEVELS_MAX: u64 = 64;

/// The store as the tree sees it: Tell's storage interface. Each operation may fail (a
/// verb to a node that stopped answering, an area out of slots) as [`TreeError::Store`].
#[allow(async_fn_in_trait)]
pub trait LlSc {
    /// The record's sequence number and value; `None` when absent.
    async fn get(&mut self, rid: Rid) -> Result<Option<(u64, Vec<u64>)>, TreeError>;
    /// Writes `value` iff the record's sequence number is still `seq` (any put since, even
    /// of the same value, fails it); whether it did.
    async fn put_if(&mut self, rid: Rid, value: Vec<u64>, seq: u64) -> Result<bool, TreeError>;
    /// Writes `value` iff the record is absent; whether it did.
    async fn put_if_absent(&mut self, rid: Rid, value: Vec<u64>) -> Result<bool, TreeError>;
    /// A fresh rid (from the store's counter).
    async fn alloc(&mut self) -> Result<Rid, TreeError>;
}

/// Why a tree operation failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TreeError {
    /// A node's words do not decode: the store holds something else at that rid.
    Malformed { rid: Rid, what: String },
    /// [`ATTEMPTS_MAX`] conditional puts failed in a row.
    Contended { key: u64 },
    /// The key is [`KEY_MAX`], which bounds every level.
    KeyOutOfRange(u64),
    /// The store could not do an operation (a failed verb).
    Store(String),
    /// Tree `tree`'s area has no node slot left of its `nodes`.
    Full { tree: u32, nodes: u32 },
}

/// One node, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// 0 for a leaf.
    pub level: u64,
    pub low: u64,
    pub high: u64,
    /// The right sibling a split made (0: none).
    pub right: Rid,
    pub keys: Vec<u64>,
    pub values: Vec<u64>,
}

impl Node {
    pub fn leaf(&self) -> bool {
        self.level == 0
    }

    fn covers(&self, key: u64) -> bool {
        self.low <= key && key < self.high
    }

    /// The child of an inner node covering `key` (within its bounds).
    fn child(&self, key: u64) -> Rid {
        self.values[self.keys.partition_point(|&k| k <= key)]
    }

    pub fn to_words(&self) -> Vec<u64> {
        let mut w = vec![
            self.level,
            self.low,
            self.high,
            self.right,
            self.keys.len() as u64,
        ];
        w.extend_from_slice(&self.keys);
        w.extend_from_slice(&self.values);
        w
    }

    pub fn from_words(rid: Rid, w: &[u64]) -> Result<Node, TreeError> {
        let bad = |what: String| Err(TreeError::Malformed { rid, what });
        let [level, low, high, right, n, ref rest @ ..] = *w else {
            return bad(format!("{} words", w.len()));
        };
        if level >= LEVELS_MAX {
            return bad(format!("level {level}"));
        }
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        let values = if level == 0 { n } else { n.saturating_add(1) };
        if n > rest.len() {
            return bad(format!("{} words for {n} keys", rest.len()));
        }
        if rest.len() != n + values {
            return bad(format!("{} words for {n} keys", rest.len()));
        }
        let keys = rest[..n].to_vec();
        if low >= high || !keys.windows(2).all(|k| k[0] < k[1]) {
            return bad(format!("bounds [{low}, {high}) or keys out of order"));
        }
        if keys.first().is_some_and(|&k| k < low) || keys.last().is_some_and(|&k| k >= high) {
            return bad(format!("keys outside [{low}, {high})"));
        }
        Ok(Node {
            level,
            low,
            high,
            right,
            keys,
            values: rest[n..].to_vec(),
        })
    }
}

/// A processing node's cached inner nodes of one tree and the root's rid, shared by its
/// co-routines (each has its own [`Tree`] over it). Bounded by the tree's inner nodes.
#[derive(Clone, Default)]
pub struct NodeCache(Arc<Mutex<CacheState>>);

#[derive(Default)]
struct CacheState {
    nodes: HashMap<Rid, Node>,
    /// The root as last read. A stale one is still a start: a node never moves left, so
    /// an old root is its level's leftmost node, its links reaching every key.
    root: Option<Rid>,
}

impl NodeCache {
    fn state(&self) -> std::sync::MutexGuard<'_, CacheState> {
        // A panic elsewhere while it was held leaves only a cache: go on with it.
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn get(&self, rid: Rid, key: u64) -> Option<Node> {
        self.state()
            .nodes
            .get(&rid)
            .filter(|n| n.covers(key))
            .cloned()
    }

    /// The child of cached inner node `rid` covering `key`, read under the lock (no copy
    /// of the node): `None` when `rid` is not cached or does not cover `key`.
    fn child(&self, rid: Rid, key: u64) -> Option<Rid> {
        self.state()
            .nodes
            .get(&rid)
            .filter(|n| n.covers(key))
            .map(|n| n.child(key))
    }

    fn insert(&self, rid: Rid, node: Node) {
        self.state().nodes.insert(rid, node);
    }

    fn remove(&self, rid: Rid) {
        self.state().nodes.remove(&rid);
    }

    /// Forgets every node and the root.
    fn clear(&self) {
        let mut s = self.state();
        s.nodes.clear();
        s.root = None;
    }

    /// Inner nodes cached.
    pub fn len(&self) -> usize {
        self.state().nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A co-routine's view of one tree: the node's cache it shares and its fanout.
pub struct Tree {
    fanout: usize,
    cache: NodeCache,
    /// Inner-node fetches and leaf fetches, for the report's counts.
    pub inner_fetches: u64,
    pub leaf_fetches: u64,
    /// Right nodes of splits that lost their race, never linked.
    pub orphans: u64,
}

/// Where a search ended: the leaf covering the key, as fetched, and the inner nodes on the
/// way (deepest last).
struct Found {
    rid: Rid,
    seq: u64,
    node: Node,
    path: Vec<Rid>,
}

impl Tree {
    /// A view of a tree of nodes of at most `fanout` entries.
    pub fn new(fanout: usize) -> Self {
        Self::with_cache(fanout, NodeCache::default())
    }

    /// A view sharing `cache` with others of the same tree.
    pub fn with_cache(fanout: usize, cache: NodeCache) -> Self {
        assert!(fanout >= FANOUT_MIN, "tell: a B+tree of fanout {fanout}");
        Tree {
            fanout,
            cache,
            inner_fetches: 0,
            leaf_fetches: 0,
            orphans: 0,
        }
    }

    /// Makes an empty tree in `store` (once, before any other operation).
    pub async fn create(store: &mut impl LlSc) -> Result<(), TreeError> {
        let leaf = store.alloc().await?;
        let empty = Node {
            level: 0,
            low: 0,
            high: KEY_MAX,
            right: 0,
            keys: vec![],
            values: vec![],
        };
        let made = store.put_if_absent(leaf, empty.to_words()).await?
            && store.put_if_absent(ROOT_RID, vec![leaf, 0]).await?;
        if made {
            Ok(())
        } else {
            Err(TreeError::Malformed {
                rid: ROOT_RID,
                what: "a tree exists here already".into(),
            })
        }
    }

    /// The rid stored under `key`.
    pub async fn get(&mut self, store: &mut impl LlSc, key: u64) -> Result<Option<Rid>, TreeError> {
        let f = self.find(store, key).await?;
        Ok(f.node
            .keys
            .binary_search(&key)
            .ok()
            .map(|i| f.node.values[i]))
    }

    /// Every `(key, rid)` with `lo <= key < hi`, in key order (following the leaves' links).
    pub async fn scan(
        &mut self,
        store: &mut impl LlSc,
        lo: u64,
        hi: u64,
    ) -> Result<Vec<(u64, Rid)>, TreeError> {
        let mut out = Vec::new();
        let mut f = self.find(store, lo).await?;
        loop {
            for (i, &k) in f.node.keys.iter().enumerate() {
                if k >= lo && k < hi {
                    out.push((k, f.node.values[i]));
                }
            }
            if f.node.high >= hi || f.node.right == 0 {
                return Ok(out);
            }
            // Keys of the next leaf are at or above this one's high bound.
            let lo_next = f.node.high;
            let (rid, seq, node) = self.fetch(store, f.node.right).await?;
            if node.low != lo_next || !node.leaf() {
                return Err(TreeError::Malformed {
                    rid,
                    what: format!(
                        "the leaf after one ending at {lo_next} starts at {}",
                        node.low
                    ),
                });
            }
            f = Found {
                rid,
                seq,
                node,
                path: f.path,
            };
        }
    }

    /// Puts `key -> rid`; whether the key was new (an existing key keeps its rid).
    pub async fn insert(
        &mut self,
        store: &mut impl LlSc,
        key: u64,
        rid: Rid,
    ) -> Result<bool, TreeError> {
        for _ in 0..ATTEMPTS_MAX {
            let f = self.find(store, key).await?;
            let Err(at) = f.node.keys.binary_search(&key) else {
                return Ok(false);
            };
            let mut node = f.node.clone();
            node.keys.insert(at, key);
            node.values.insert(at, rid);
            if node.keys.len() <= self.fanout {
                if store.put_if(f.rid, node.to_words(), f.seq).await? {
                    return Ok(true);
                }
                continue;
            }
            if self.split(store, f.rid, f.seq, node, &f.path).await? {
                return Ok(true);
            }
        }
        Err(TreeError::Contended { key })
    }

    /// Puts every `(key, rid)` of `entries` (keys ascending, none twice): the keys one leaf
    /// covers go in by one conditional put when they fit in it (an insert's consecutive
    /// keys share a leaf: TPC-C's order lines), the others as [`Tree::insert`] would. How
    /// many keys were new (an existing key keeps its rid).
    pub async fn insert_sorted(
        &mut self,
        store: &mut impl LlSc,
        entries: &[(u64, Rid)],
    ) -> Result<u64, TreeError> {
        if let Some(w) = entries.windows(2).find(|w| w[0].0 >= w[1].0) {
            return Err(TreeError::Malformed {
                rid: ROOT_RID,
                what: format!("a batch of keys out of order ({} then {})", w[0].0, w[1].0),
            });
        }
        let (mut i, mut new) = (0, 0);
        'next: while i < entries.len() {
            for _ in 0..ATTEMPTS_MAX {
                let f = self.find(store, entries[i].0).await?;
                let mut node = f.node.clone();
                let (mut j, mut added) = (i, 0);
                while j < entries.len() && node.covers(entries[j].0) {
                    let (key, rid) = entries[j];
                    if let Err(at) = node.keys.binary_search(&key) {
                        node.keys.insert(at, key);
                        node.values.insert(at, rid);
                        added += 1;
                    }
                    j += 1;
                }
                if node.keys.len() > self.fanout {
                    // More than the leaf holds: the first key alone, splitting it.
                    new += u64::from(self.insert(store, entries[i].0, entries[i].1).await?);
                    i += 1;
                    continue 'next;
                }
                if added == 0 || store.put_if(f.rid, node.to_words(), f.seq).await? {
                    new += added;
                    i = j;
                    continue 'next;
                }
            }
            return Err(TreeError::Contended { key: entries[i].0 });
        }
        Ok(new)
    }

    /// Takes `key` out; whether it was there. Nodes never merge.
    pub async fn remove(&mut self, store: &mut impl LlSc, key: u64) -> Result<bool, TreeError> {
        for _ in 0..ATTEMPTS_MAX {
            let f = self.find(store, key).await?;
            let Ok(at) = f.node.keys.binary_search(&key) else {
                return Ok(false);
            };
            let mut node = f.node;
            node.keys.remove(at);
            node.values.remove(at);
            if store.put_if(f.rid, node.to_words(), f.seq).await? {
                return Ok(true);
            }
        }
        Err(TreeError::Contended { key })
    }

    /// Splits `full` (node `rid` as of `seq`, one entry over the fanout): the upper half to
    /// a new right node, then the lower half in place; then the separator into the parent.
    /// `false` when `rid` changed meanwhile (the caller starts again).
    async fn split(
        &mut self,
        store: &mut impl LlSc,
        rid: Rid,
        seq: u64,
        full: Node,
        path: &[Rid],
    ) -> Result<bool, TreeError> {
        let level = full.level;
        let (mut left, sep, right) = halves(full);
        let right_rid = put_fresh(store, &right).await?;
        left.right = right_rid;
        if !store.put_if(rid, left.to_words(), seq).await? {
            self.orphans += 1;
            return Ok(false);
        }
        if !left.leaf() {
            self.cache.insert(rid, left);
        }
        self.add_separator(store, level, sep, rid, right_rid, path.to_vec())
            .await?;
        Ok(true)
    }

    /// Puts `sep -> right` into the parent of `left` (a node of `level` that just split):
    /// the deepest node of `path` or a node its links lead to, split in turn if full; a new
    /// root if `left` is the root.
    async fn add_separator(
        &mut self,
        store: &mut impl LlSc,
        level: u64,
        sep: u64,
        left: Rid,
        right: Rid,
        mut path: Vec<Rid>,
    ) -> Result<(), TreeError> {
        for _ in 0..ATTEMPTS_MAX {
            let Some(parent) = path.pop() else {
                if self.new_root(store, level, sep, left, right).await? {
                    return Ok(());
                }
                // The root grew above `left` meanwhile: find its parent level from the top.
                path = self.path_to(store, level, sep).await?;
                continue;
            };
            let (mut prid, mut pseq, mut p) = self.fetch(store, parent).await?;
            while p.high <= sep && p.right != 0 {
                (prid, pseq, p) = self.fetch(store, p.right).await?;
            }
            if p.level != level + 1 || !p.covers(sep) {
                return Err(TreeError::Malformed {
                    rid: prid,
                    what: format!(
                        "level {} node [{}, {}) as the parent of a level {level} split at {sep}",
                        p.level, p.low, p.high
                    ),
                });
            }
            let at = p.keys.partition_point(|&k| k < sep);
            let mut node = p;
            node.keys.insert(at, sep);
            node.values.insert(at + 1, right);
            if node.keys.len() <= self.fanout {
                if store.put_if(prid, node.to_words(), pseq).await? {
                    self.cache.insert(prid, node);
                    return Ok(());
                }
                path.push(parent);
                continue;
            }
            if Box::pin(self.split(store, prid, pseq, node, &path)).await? {
                return Ok(());
            }
            path.push(parent);
        }
        Err(TreeError::Contended { key: sep })
    }

    /// Makes a new root over `left` and `right` (of `level`) if `left` is still the root.
    async fn new_root(
        &mut self,
        store: &mut impl LlSc,
        level: u64,
        sep: u64,
        left: Rid,
        right: Rid,
    ) -> Result<bool, TreeError> {
        let (seq, (root, root_level)) = self.root(store).await?;
        if root != left {
            return Ok(false);
        }
        if root_level != level || level + 1 >= LEVELS_MAX {
            return Err(TreeError::Malformed {
                rid: ROOT_RID,
                what: format!("root {root} of level {root_level} split as level {level}"),
            });
        }
        let node = Node {
            level: level + 1,
            low: 0,
            high: KEY_MAX,
            right: 0,
            keys: vec![sep],
            values: vec![left, right],
        };
        let rid = put_fresh(store, &node).await?;
        if store.put_if(ROOT_RID, vec![rid, level + 1], seq).await? {
            return Ok(true);
        }
        self.orphans += 1;
        Ok(false)
    }

    /// The inner nodes from the root down to level `level + 1`, routed by `key` and fetched
    /// fresh (empty when the root is at `level`).
    async fn path_to(
        &mut self,
        store: &mut impl LlSc,
        level: u64,
        key: u64,
    ) -> Result<Vec<Rid>, TreeError> {
        let (_, (mut rid, root_level)) = self.root(store).await?;
        let mut path = Vec::new();
        if root_level <= level {
            return Ok(path);
        }
        loop {
            let (_, _, n) = self.fetch(store, rid).await?;
            if n.covers(key) {
                if n.level == level + 1 {
                    path.push(rid);
                    return Ok(path);
                }
                path.push(rid);
                rid = n.child(key);
            } else if key >= n.high && n.right != 0 {
                rid = n.right;
            } else {
                return Err(TreeError::Malformed {
                    rid,
                    what: format!("node [{}, {}) on the way to key {key}", n.low, n.high),
                });
            }
        }
    }

    /// The leaf covering `key`, fetched, and the inner nodes above it.
    async fn find(&mut self, store: &mut impl LlSc, key: u64) -> Result<Found, TreeError> {
        if key == KEY_MAX {
            return Err(TreeError::KeyOutOfRange(key));
        }
        for _ in 0..ATTEMPTS_MAX {
            if let Some(f) = self.descend(store, key).await? {
                return Ok(f);
            }
            // A stale cached path: every inner node is fetched again.
            self.cache.clear();
        }
        Err(TreeError::Contended { key })
    }

    /// One descent through cached inner nodes; `None` when the path proved stale.
    async fn descend(
        &mut self,
        store: &mut impl LlSc,
        key: u64,
    ) -> Result<Option<Found>, TreeError> {
        let cached_root = self.cache.state().root;
        let mut rid = match cached_root {
            Some(r) => r,
            None => {
                let (_, (r, _)) = self.root(store).await?;
                self.cache.state().root = Some(r);
                r
            }
        };
        let mut path = Vec::new();
        loop {
            let cached = self.cache.get(rid, key);
            let node = match cached {
                Some(n) => n,
                None => {
                    let (_, seq, n) = self.fetch(store, rid).await?;
                    if n.leaf() {
                        // Follow the links right to the leaf that covers the key.
                        return self.leaf_right(store, rid, seq, n, key, path).await;
                    }
                    if key < n.low {
                        return Ok(None);
                    }
                    self.cache.insert(rid, n.clone());
                    n
                }
            };
            if !node.covers(key) {
                rid = node.right;
                continue;
            }
            path.push(rid);
            rid = node.child(key);
        }
    }

    async fn leaf_right(
        &mut self,
        store: &mut impl LlSc,
        mut rid: Rid,
        mut seq: u64,
        mut node: Node,
        key: u64,
        path: Vec<Rid>,
    ) -> Result<Option<Found>, TreeError> {
        loop {
            if key < node.low {
                return Ok(None);
            }
            if node.covers(key) {
                return Ok(Some(Found {
                    rid,
                    seq,
                    node,
                    path,
                }));
            }
            if node.right == 0 {
                return Err(TreeError::Malformed {
                    rid,
                    what: format!("the rightmost leaf ends at {} below key {key}", node.high),
                });
            }
            // The parent's cached copy predates the split: fetch it next time.
            if let Some(&p) = path.last() {
                self.cache.remove(p);
            }
            (rid, seq, node) = self.fetch(store, node.right).await?;
        }
    }

    /// The root record: its sequence number, the root's rid and the height.
    async fn root(&mut self, store: &mut impl LlSc) -> Result<(u64, (Rid, u64)), TreeError> {
        match store.get(ROOT_RID).await? {
            Some((seq, w)) if w.len() == 2 => Ok((seq, (w[0], w[1]))),
            other => Err(TreeError::Malformed {
                rid: ROOT_RID,
                what: format!("root record {other:?}"),
            }),
        }
    }

    async fn fetch(
        &mut self,
        store: &mut impl LlSc,
        rid: Rid,
    ) -> Result<(Rid, u64, Node), TreeError> {
        let Some((seq, w)) = store.get(rid).await? else {
            return Err(TreeError::Malformed {
                rid,
                what: "no node".into(),
            });
        };
        let node = Node::from_words(rid, &w)?;
        if node.leaf() {
            self.leaf_fetches += 1;
        } else {
            self.inner_fetches += 1;
        }
        Ok((rid, seq, node))
    }
}

/// One key's lookup driven by a caller that fetches the nodes itself, so that the lookups
/// of many keys share each round trip ([`Tree::lookup_step`], [`Tree::lookup_take`]): the
/// same descent as [`Tree::get`]'s, through the shared cache, without its `await`s.
#[derive(Clone, Debug)]
pub struct Lookup {
    key: u64,
    at: LookupAt,
    /// The inner node the descent came through last (dropped from the cache when its
    /// child turns out to have split since).
    parent: Option<Rid>,
    /// Nodes fetched so far, bounded by [`ATTEMPTS_MAX`].
    fetched: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LookupAt {
    /// The root record is to be read.
    Root,
    Node(Rid),
    Done(Option<Rid>),
}

/// What a lookup needs next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LookupStep {
    /// The words of this rid ([`Tree::lookup_take`] takes them).
    Fetch(Rid),
    /// The rid stored under the key, or `None`.
    Found(Option<Rid>),
}

impl Lookup {
    pub fn key(&self) -> u64 {
        self.key
    }
}

impl Tree {
    /// A lookup of `key`, started at the cached root.
    pub fn lookup(&self, key: u64) -> Result<Lookup, TreeError> {
        if key == KEY_MAX {
            return Err(TreeError::KeyOutOfRange(key));
        }
        let root = self.cache.state().root;
        Ok(Lookup {
            key,
            at: root.map_or(LookupAt::Root, LookupAt::Node),
            parent: None,
            fetched: 0,
        })
    }

    /// Walks `l` down the cached inner nodes: the rid to fetch next, or its answer.
    pub fn lookup_step(&self, l: &mut Lookup) -> LookupStep {
        for _ in 0..LEVELS_MAX {
            match l.at {
                LookupAt::Root => return LookupStep::Fetch(ROOT_RID),
                LookupAt::Done(found) => return LookupStep::Found(found),
                LookupAt::Node(rid) => match self.cache.child(rid, l.key) {
                    Some(child) => {
                        l.parent = Some(rid);
                        l.at = LookupAt::Node(child);
                    }
                    None => return LookupStep::Fetch(rid),
                },
            }
        }
        // Each cached step goes a level down, so a walk this long met a cycle of
        // cached nodes; fetching the node again breaks it.
        match l.at {
            LookupAt::Node(rid) => LookupStep::Fetch(rid),
            _ => LookupStep::Fetch(ROOT_RID),
        }
    }

    /// Takes the words of the rid `l` asked for (`None`: no such node), as read between
    /// two equal unlocked sequence numbers.
    pub fn lookup_take(
        &mut self,
        l: &mut Lookup,
        rid: Rid,
        words: Option<&[u64]>,
    ) -> Result<(), TreeError> {
        l.fetched += 1;
        if l.fetched > ATTEMPTS_MAX {
            return Err(TreeError::Contended { key: l.key });
        }
        let Some(w) = words else {
            return Err(TreeError::Malformed {
                rid,
                what: "no node".into(),
            });
        };
        if rid == ROOT_RID {
            let &[root, _level] = w else {
                return Err(TreeError::Malformed {
                    rid,
                    what: format!("root record {w:?}"),
                });
            };
            self.cache.state().root = Some(root);
            l.at = LookupAt::Node(root);
            return Ok(());
        }
        let node = Node::from_words(rid, w)?;
        if node.leaf() {
            self.leaf_fetches += 1;
        } else {
            self.inner_fetches += 1;
        }
        if l.key < node.low {
            // A stale cached path: start again from the root, every inner node refetched.
            self.cache.clear();
            l.at = LookupAt::Root;
            l.parent = None;
            return Ok(());
        }
        if node.covers(l.key) {
            l.at = if node.leaf() {
                let i = node.keys.binary_search(&l.key).ok();
                LookupAt::Done(i.map(|i| node.values[i]))
            } else {
                let child = node.child(l.key);
                self.cache.insert(rid, node);
                l.parent = Some(rid);
                LookupAt::Node(child)
            };
            return Ok(());
        }
        if node.right == 0 {
            return Err(TreeError::Malformed {
                rid,
                what: format!(
                    "the rightmost node ends at {} below key {}",
                    node.high, l.key
                ),
            });
        }
        if node.leaf() {
            // The parent's cached copy predates the split: fetch it next time.
            if let Some(p) = l.parent {
                self.cache.remove(p);
            }
        } else {
            self.cache.insert(rid, node.clone());
        }
        l.at = LookupAt::Node(node.right);
        Ok(())
    }
}

/// Puts `node` at a fresh rid from the store's counter, which no other writer holds.
async fn put_fresh(store: &mut impl LlSc, node: &Node) -> Result<Rid, TreeError> {
    let rid = store.alloc().await?;
    if store.put_if_absent(rid, node.to_words()).await? {
        Ok(rid)
    } else {
        Err(TreeError::Malformed {
            rid,
            what: "a fresh rid from the counter is taken".into(),
        })
    }
}

/// A node one over its fanout as its lower half, the separator and its upper half (the
/// upper half keeps the old high bound and link; the caller links the lower half to it).
fn halves(full: Node) -> (Node, u64, Node) {
    let mid = full.keys.len() / 2;
    let sep = full.keys[mid];
    let (keys_l, keys_r, vals_l, vals_r) = if full.leaf() {
        (
            full.keys[..mid].to_vec(),
            full.keys[mid..].to_vec(),
            full.values[..mid].to_vec(),
            full.values[mid..].to_vec(),
        )
    } else {
        // The separator moves up; child `mid` starts the right half.
        (
            full.keys[..mid].to_vec(),
            full.keys[mid + 1..].to_vec(),
            full.values[..=mid].to_vec(),
            full.values[mid + 1..].to_vec(),
        )
    };
    let left = Node {
        level: full.level,
        low: full.low,
        high: sep,
        right: 0,
        keys: keys_l,
        values: vals_l,
    };
    let right = Node {
        level: full.level,
        low: sep,
        high: full.high,
        right: full.right,
        keys: keys_r,
        values: vals_r,
    };
    (left, sep, right)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::BTreeMap;
    use std::future::Future;
    use std::pin::Pin;
    use std::rc::Rc;
    use std::task::{Context, Poll, Waker};

    /// The store every writer shares: `rid -> (seq, value)` and the rid counter.
    #[derive(Default)]
    struct Shared {
        records: HashMap<Rid, (u64, Vec<u64>)>,
        next_rid: Rid,
        puts_failed: u64,
    }

    /// One writer's handle: each operation yields once before it runs, so that the
    /// scheduler interleaves writers at every store access, as a network would.
    struct MemStore(Rc<RefCell<Shared>>);

    struct YieldOnce(bool);

    impl Future for YieldOnce {
        type Output = ();
        fn poll(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
            if self.0 {
                Poll::Ready(())
            } else {
                self.0 = true;
                Poll::Pending
            }
        }
    }

    impl LlSc for MemStore {
        async fn get(&mut self, rid: Rid) -> Result<Option<(u64, Vec<u64>)>, TreeError> {
            YieldOnce(false).await;
            Ok(self.0.borrow().records.get(&rid).cloned())
        }
        async fn put_if(&mut self, rid: Rid, value: Vec<u64>, seq: u64) -> Result<bool, TreeError> {
            YieldOnce(false).await;
            let mut s = self.0.borrow_mut();
            Ok(match s.records.get_mut(&rid) {
                Some(r) if r.0 == seq => {
                    *r = (seq + 1, value);
                    true
                }
                _ => {
                    s.puts_failed += 1;
                    false
                }
            })
        }
        async fn put_if_absent(&mut self, rid: Rid, value: Vec<u64>) -> Result<bool, TreeError> {
            YieldOnce(false).await;
            let mut s = self.0.borrow_mut();
            if s.records.contains_key(&rid) {
                return Ok(false);
            }
            s.records.insert(rid, (0, value));
            Ok(true)
        }
        async fn alloc(&mut self) -> Result<Rid, TreeError> {
            YieldOnce(false).await;
            let mut s = self.0.borrow_mut();
            s.next_rid += 1;
            Ok(s.next_rid)
        }
    }

    fn shared() -> Rc<RefCell<Shared>> {
        Rc::new(RefCell::new(Shared {
            next_rid: ROOT_RID,
            ..Shared::default()
        }))
    }

    /// Polls every future, in an order the seed picks at each step, until all are done.
    fn run_interleaved(mut tasks: Vec<Pin<Box<dyn Future<Output = ()>>>>, seed: u64) {
        let mut rng = atoll_fabric::rng::Rng::new(seed);
        let mut cx = Context::from_waker(Waker::noop());
        while !tasks.is_empty() {
            let i = rng.below(tasks.len() as u64) as usize;
            if tasks[i].as_mut().poll(&mut cx).is_ready() {
                drop(tasks.swap_remove(i));
            }
        }
    }

    fn block_on<T>(f: impl Future<Output = T>) -> T {
        let mut f = std::pin::pin!(f);
        let mut cx = Context::from_waker(Waker::noop());
        loop {
            if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
                return v;
            }
        }
    }

    /// Looks `keys` up together, one store access per fetch each round, as a processing
    /// node's doorbell would.
    async fn lookup_batch(tree: &mut Tree, store: &mut MemStore, keys: &[u64]) -> Vec<Option<Rid>> {
        let mut ls: Vec<Lookup> = keys.iter().map(|&k| tree.lookup(k).unwrap()).collect();
        let mut out = vec![None; keys.len()];
        let mut done = vec![false; keys.len()];
        while done.iter().any(|d| !d) {
            for (j, l) in ls.iter_mut().enumerate() {
                if done[j] {
                    continue;
                }
                match tree.lookup_step(l) {
                    LookupStep::Found(r) => {
                        out[j] = r;
                        done[j] = true;
                    }
                    LookupStep::Fetch(rid) => {
                        let got = store.get(rid).await.unwrap();
                        tree.lookup_take(l, rid, got.as_ref().map(|(_, w)| &w[..]))
                            .unwrap();
                    }
                }
            }
        }
        out
    }

    #[test]
    fn tell_btree_one_writer_agrees_with_a_btreemap_across_splits() {
        let s = shared();
        let mut store = MemStore(s.clone());
        block_on(Tree::create(&mut store)).unwrap();
        let mut tree = Tree::new(4);
        let mut model = BTreeMap::new();
        let mut rng = atoll_fabric::rng::Rng::new(3);
        for i in 0..3_000u64 {
            let key = rng.below(500);
            if rng.below(3) == 0 {
                let had = block_on(tree.remove(&mut store, key)).unwrap();
                assert_eq!(had, model.remove(&key).is_some(), "remove {key} at {i}");
            } else {
                let new = block_on(tree.insert(&mut store, key, i + 100)).unwrap();
                assert_eq!(new, !model.contains_key(&key), "insert {key} at {i}");
                model.entry(key).or_insert(i + 100);
            }
        }
        // Batches of consecutive keys, some there already, some past a leaf's room.
        for b in 0..40u64 {
            let batch: Vec<(u64, Rid)> = (0..1 + b % 9).map(|k| (480 + b * 5 + k * 3, b)).collect();
            let fresh = batch.iter().filter(|(k, _)| !model.contains_key(k)).count() as u64;
            let new = block_on(tree.insert_sorted(&mut store, &batch)).unwrap();
            assert_eq!(new, fresh, "batch {b}");
            for &(k, r) in &batch {
                model.entry(k).or_insert(r);
            }
        }
        for key in 0..800 {
            assert_eq!(
                block_on(tree.get(&mut store, key)).unwrap(),
                model.get(&key).copied()
            );
        }
        let all = block_on(tree.scan(&mut store, 0, KEY_MAX)).unwrap();
        assert_eq!(all, model.iter().map(|(&k, &v)| (k, v)).collect::<Vec<_>>());
        let part = block_on(tree.scan(&mut store, 100, 200)).unwrap();
        assert_eq!(
            part,
            model
                .range(100..200)
                .map(|(&k, &v)| (k, v))
                .collect::<Vec<_>>()
        );
        assert!(tree.leaf_fetches > 0 && tree.orphans == 0);
        let (_, (_, root_level)) = block_on(tree.root(&mut store)).unwrap();
        assert!(
            root_level >= 2,
            "3,000 operations on fanout 4 grew {root_level} levels"
        );
    }

    /// Writers on one tree, each with its own cache, interleaved at every store access;
    /// each owns the keys `w mod WRITERS`, so the final tree is known; readers meanwhile must
    /// find every key loaded before and never removed, through every split.
    #[test]
    fn tell_btree_concurrent_ll_sc_writers_agree_with_a_btreemap_and_readers_miss_nothing() {
        const WRITERS: u64 = 4;
        const KEYS: u64 = 400;
        for seed in 0..20 {
            let s = shared();
            block_on(Tree::create(&mut MemStore(s.clone()))).unwrap();
            // Stable keys: multiples of 1000 above the writers' range, loaded first.
            let stable: Vec<u64> = (1..=20).map(|k| 1_000 * k).collect();
            let mut loader = Tree::new(4);
            for &k in &stable {
                block_on(loader.insert(&mut MemStore(s.clone()), k, k)).unwrap();
            }
            let models: Rc<RefCell<BTreeMap<u64, u64>>> = Rc::default();
            let mut tasks: Vec<Pin<Box<dyn Future<Output = ()>>>> = Vec::new();
            // Writers 0 and 1 and the batch reader share one node's cache.
            let node_cache = NodeCache::default();
            for w in 0..WRITERS {
                let (s, models) = (s.clone(), models.clone());
                let cache = if w < 2 {
                    node_cache.clone()
                } else {
                    NodeCache::default()
                };
                tasks.push(Box::pin(async move {
                    let mut store = MemStore(s);
                    let mut tree = Tree::with_cache(4, cache);
                    let mut rng = atoll_fabric::rng::Rng::derive(seed, w);
                    for i in 0..300 {
                        let key = rng.below(KEYS / WRITERS) * WRITERS + w;
                        if rng.below(4) == 0 {
                            let had = tree.remove(&mut store, key).await.unwrap();
                            assert_eq!(had, models.borrow_mut().remove(&key).is_some());
                        } else {
                            let new = tree.insert(&mut store, key, i).await.unwrap();
                            let mut m = models.borrow_mut();
                            assert_eq!(new, !m.contains_key(&key), "seed {seed} key {key}");
                            m.entry(key).or_insert(i);
                        }
                    }
                }));
            }
            for r in 0..2u64 {
                let (s, stable) = (s.clone(), stable.clone());
                tasks.push(Box::pin(async move {
                    let mut store = MemStore(s);
                    let mut tree = Tree::new(4);
                    for i in 0..200 {
                        let k = stable[(i + r as usize) % stable.len()];
                        assert_eq!(
                            tree.get(&mut store, k).await.unwrap(),
                            Some(k),
                            "seed {seed}"
                        );
                        let found = tree.scan(&mut store, 0, KEY_MAX).await.unwrap();
                        let stable_seen = found.iter().filter(|(k, _)| k % 1_000 == 0 && *k > 0);
                        assert_eq!(
                            stable_seen.count(),
                            stable.len(),
                            "seed {seed}: a scan missed one"
                        );
                    }
                }));
            }
            let (s2, stable2) = (s.clone(), stable.clone());
            tasks.push(Box::pin(async move {
                let mut store = MemStore(s2);
                let mut tree = Tree::with_cache(4, node_cache);
                for i in 0..100 {
                    // Three stable keys and one never loaded, in one batch a round trip.
                    let keys = [
                        stable2[i % stable2.len()],
                        stable2[(i + 7) % stable2.len()],
                        stable2[(i + 13) % stable2.len()],
                        1_000 * 40 + 1,
                    ];
                    let found = lookup_batch(&mut tree, &mut store, &keys).await;
                    let expect: Vec<Option<Rid>> = keys
                        .iter()
                        .map(|&k| (k % 1_000 == 0).then_some(k))
                        .collect();
                    assert_eq!(found, expect, "seed {seed}: a batched lookup");
                }
            }));
            run_interleaved(tasks, seed);
            let mut tree = Tree::new(4);
            let mut store = MemStore(s.clone());
            let all = block_on(tree.scan(&mut store, 0, KEY_MAX)).unwrap();
            let mut expect: Vec<(u64, u64)> =
                models.borrow().iter().map(|(&k, &v)| (k, v)).collect();
            expect.extend(stable.iter().map(|&k| (k, k)));
            expect.sort_unstable();
            assert_eq!(all, expect, "seed {seed}");
            assert!(
                s.borrow().puts_failed > 0,
                "seed {seed}: the writers never raced"
            );
        }
    }

    #[test]
    fn tell_btree_a_malformed_node_is_a_typed_error() {
        assert!(matches!(
            Node::from_words(9, &[0, 5, 3, 0, 0]),
            Err(TreeError::Malformed { rid: 9, .. })
        ));
        assert!(matches!(
            Node::from_words(9, &[0, 0, 9, 0, 7]),
            Err(TreeError::Malformed { .. })
        ));
        assert!(matches!(
            Node::from_words(9, &[0, 0, 9, 0, 2, 5, 4, 1, 1]),
            Err(TreeError::Malformed { .. })
        ));
        let leaf = Node {
            level: 0,
            low: 0,
            high: 9,
            right: 0,
            keys: vec![1, 5],
            values: vec![10, 50],
        };
        assert_eq!(Node::from_words(9, &leaf.to_words()), Ok(leaf));
        let s = shared();
        let mut store = MemStore(s);
        block_on(Tree::create(&mut store)).unwrap();
        let mut tree = Tree::new(4);
        assert_eq!(
            block_on(tree.insert(&mut store, KEY_MAX, 1)),
            Err(TreeError::KeyOutOfRange(KEY_MAX))
        );
    }
}
