//! Typed RPC messages between a coordinator and a participant, and their byte encoding.
//!
//! Every request is batched per target node (one RPC per node per stage). The encoding is a
//! sequence of little-endian 64-bit words: a tag, then fields; variable parts carry their
//! length first. Decoding checks every length and tag and returns [`DecodeError`] on
//! anything malformed: a message from the network is untrusted input.
//!
//! The messages here are the shared runtime's. A protocol family's own requests and replies
//! travel as [`Request::Family`] / [`Reply::Family`]: the family's id, then the family's
//! own encoding (written and read with [`WordWriter`] / [`WordReader`]), which the
//! participant hands to the family's registered [`crate::handler::Participant`].

use atoll_fabric::Words;
use atoll_storage::TableId;
use std::fmt;

/// A record's slot in its table on its node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Loc(pub u32);

/// Words an [`Item`] takes on the wire: table, key, location.
pub const ITEM_WORDS: usize = 3;

/// The word an unknown location travels as: above every `u32`, so no slot reads as it.
const NO_LOC_WORD: u64 = 1 << 32;

/// A record named by a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Item {
    pub table: TableId,
    pub key: u64,
    /// Record slot if the coordinator knows it; else the participant looks the key up.
    pub loc: Option<Loc>,
}

/// A tuple as a participant returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tuple {
    pub loc: Loc,
    pub lock: u64,
    pub version: u64,
    /// Write timestamp and read timestamp (lease end; may carry `RTS_FROZEN`).
    pub wts: u64,
    pub rts: u64,
    pub data: Words,
}

impl Tuple {
    pub fn from_parts(h: TupleHead, data: Words) -> Self {
        Tuple {
            loc: h.loc,
            lock: h.lock,
            version: h.version,
            wts: h.wts,
            rts: h.rts,
            data,
        }
    }

    /// Everything but the payload.
    pub fn head(&self) -> TupleHead {
        TupleHead {
            loc: self.loc,
            lock: self.lock,
            version: self.version,
            wts: self.wts,
            rts: self.rts,
        }
    }
}

/// A tuple's header fields as a participant reports them ([`Tuple`] without its payload).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TupleHead {
    pub loc: Loc,
    pub lock: u64,
    pub version: u64,
    pub wts: u64,
    pub rts: u64,
}

/// Writes a [`Reply::Tuples`] of `n` entries straight into a reply buffer, one entry at a
/// time, in the bytes [`Reply::encode`] writes: a participant serving a read or a lock
/// builds no [`Tuple`] (a move of a payload buffer each) and no vector of them.
pub struct TuplesWriter<'a> {
    e: WordWriter<'a>,
    left: usize,
}

impl<'a> TuplesWriter<'a> {
    pub fn begin(out: &'a mut Vec<u8>, n: usize) -> Self {
        let mut e = WordWriter(out);
        e.tag(ReplyTag::Tuples);
        e.w(n as u64);
        TuplesWriter { e, left: n }
    }

    fn entry(&mut self) {
        assert!(
            self.left > 0,
            "a Tuples reply given more entries than it declared"
        );
        self.left -= 1;
    }

    /// An entry for an item that does not exist.
    pub fn none(&mut self) {
        self.entry();
        self.e.w(0);
    }

    pub fn tuple(&mut self, h: &TupleHead, data: &[u64]) {
        self.entry();
        write_tuple(&mut self.e, h, data);
    }

    /// An entry for an item whose payload of `payload_words` words `read` copies into the
    /// reply where it lies (little-endian words) and whose header it returns; `None` from
    /// `read` makes it the entry of an absent item. The record is copied once, from memory
    /// into the reply (no payload buffer between).
    pub fn tuple_in_place(
        &mut self,
        payload_words: usize,
        read: impl FnOnce(&mut [u8]) -> Option<TupleHead>,
    ) {
        self.entry();
        let out = &mut *self.e.0;
        let at = out.len();
        let payload_at = at + TUPLE_HEAD_WORDS * 8;
        out.resize(payload_at + payload_words * 8, 0);
        match read(&mut out[payload_at..]) {
            Some(h) => {
                let head = [
                    1,
                    h.loc.0 as u64,
                    h.lock,
                    h.version,
                    h.wts,
                    h.rts,
                    payload_words as u64,
                ];
                for (b, v) in out[at..payload_at].chunks_exact_mut(8).zip(head) {
                    b.copy_from_slice(&v.to_le_bytes());
                }
            }
            None => {
                out.truncate(at);
                self.e.w(0);
            }
        }
    }

    /// Every declared entry was written.
    pub fn finish(self) {
        assert_eq!(
            self.left, 0,
            "a Tuples reply ended {} entries short",
            self.left
        );
    }
}

/// A reply read where it lies: a `Tuples` reply's entries are read one at a time from its
/// bytes (no vector of [`Tuple`]s, no payload buffer per entry: issue #9); any other reply
/// is decoded.
pub enum ReplyView<'a> {
    Tuples(TuplesReader<'a>),
    Other(Reply),
}

impl<'a> ReplyView<'a> {
    pub fn new(b: &'a [u8]) -> Result<Self, DecodeError> {
        let mut d = WordReader::new(b, "reply");
        if ReplyTag::try_from(d.w()?)? == ReplyTag::Tuples {
            let left = d.len()?;
            let r = TuplesReader { d, left };
            if left == 0 {
                r.d.done()?;
            }
            return Ok(ReplyView::Tuples(r));
        }
        Reply::decode(b).map(ReplyView::Other)
    }
}

/// The entries of a `Tuples` reply, read in order from its bytes.
pub struct TuplesReader<'a> {
    d: WordReader<'a>,
    left: usize,
}

/// One present entry of a `Tuples` reply, its payload still in the reply's bytes.
pub struct TupleRef<'a> {
    pub head: TupleHead,
    data: &'a [u8],
}

impl<'a> TupleRef<'a> {
    /// The payload's words.
    pub fn data(&self) -> impl ExactSizeIterator<Item = u64> + 'a {
        self.data
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
    }

    pub fn data_is_empty(&self) -> bool {
        self.data.is_empty()
    }
}

impl<'a> TuplesReader<'a> {
    /// Entries not yet read.
    pub fn left(&self) -> usize {
        self.left
    }

    /// The next entry (`None` inside for an absent key), or `None` after the last; the
    /// last one read also checks that nothing trails it.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<Result<Option<TupleRef<'a>>, DecodeError>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        let r = self.entry();
        if self.left == 0 && r.is_ok() {
            if let Err(e) = self.d.done() {
                return Some(Err(e));
            }
        }
        Some(r)
    }

    fn entry(&mut self) -> Result<Option<TupleRef<'a>>, DecodeError> {
        let d = &mut self.d;
        if !d.bool()? {
            return Ok(None);
        }
        let head = TupleHead {
            loc: Loc(d.u32()?),
            lock: d.w()?,
            version: d.w()?,
            wts: d.w()?,
            rts: d.w()?,
        };
        let n = d.len()?;
        let (data, rest) = d.b.split_at(n * 8);
        d.b = rest;
        Ok(Some(TupleRef { head, data }))
    }
}

/// Words of a `Tuples` reply before its entries: tag, count.
pub const TUPLES_HEAD_WORDS: usize = 2;
/// Words of one present entry of a `Tuples` reply besides its payload: presence, location,
/// lock, version, `WTS`, `RTS`, payload length.
pub const TUPLE_HEAD_WORDS: usize = 7;

fn write_tuple(e: &mut WordWriter<'_>, h: &TupleHead, data: &[u64]) {
    e.w(1);
    e.w(h.loc.0 as u64);
    e.w(h.lock);
    e.w(h.version);
    e.w(h.wts);
    e.w(h.rts);
    e.words(data);
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Consistent reads of records (no locking).
    Read {
        items: Vec<Item>,
    },
    /// Lock every item for `ts` (all or none), returning the tuples when `want_data`.
    Lock {
        ts: u64,
        want_data: bool,
        /// Also freeze each record's read timestamp (SUNDIAL, MVCC writers).
        freeze: bool,
        items: Vec<Item>,
    },
    /// Check that each record is unlocked (or locked by `ts`) and still at the version.
    Validate {
        ts: u64,
        items: Vec<(TableId, u32, u64)>,
    },
    /// Copy `words` into the log region at `offset` (a coordinator's log ring).
    Log {
        offset: u32,
        words: Vec<u64>,
    },
    /// The head word of the log ring starting at `offset` in the log region: how many of its
    /// records the node applied ([`crate::log_ring`]).
    LogHead {
        offset: u32,
    },
    /// Install payloads, bump versions, and (if `release`) unlock records held by `ts`.
    WriteBack(WriteBack),
    /// Unlock records held by `ts`.
    Release {
        ts: u64,
        items: Vec<(TableId, u32)>,
    },
    /// Insert a record locked by `ts` (freed by the transaction's release).
    Insert {
        ts: u64,
        table: TableId,
        key: u64,
        payload: Words,
    },
    Delete {
        table: TableId,
        key: u64,
    },
    /// Take back an insert made by `ts` in an attempt that aborts: the record goes back to
    /// what it was (absent), and `ts`'s lock on it is freed.
    UndoInsert {
        ts: u64,
        table: TableId,
        key: u64,
    },
    Scan {
        table: TableId,
        lo: u64,
        hi: u64,
        limit: u32,
        reverse: bool,
    },
    /// A protocol family's own request: served by the participant registered for `family`,
    /// which decodes `body` (whole words).
    Family {
        family: FamilyId,
        body: Vec<u8>,
    },
}

/// A protocol family, as its messages name it. Each family picks its own; the participant
/// refuses to register two families with one id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct FamilyId(pub u8);

/// A write-back batch for one node: install each payload, bump its version, set `WTS` and
/// `RTS` to `set_ts` when it is not 0 (a lease or version timestamp), and with `release`
/// unlock records held by `ts`. Families that install differently (MVCC keeps the old
/// version) send the same batch in their own request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteBack {
    pub ts: u64,
    pub release: bool,
    pub set_ts: u64,
    pub items: Vec<(TableId, u32, Words)>,
}

impl WriteBack {
    pub fn encode(&self, e: &mut WordWriter<'_>) {
        e.w(self.ts);
        e.w(self.release as u64);
        e.w(self.set_ts);
        e.w(self.items.len() as u64);
        for (t, loc, p) in &self.items {
            e.w(t.0 as u64);
            e.w(*loc as u64);
            e.words(p);
        }
    }

    pub fn decode(d: &mut WordReader<'_>) -> Result<WriteBack, DecodeError> {
        let ts = d.w()?;
        let release = d.bool()?;
        let set_ts = d.w()?;
        let items = d.list(|d| Ok((d.table()?, d.u32()?, d.words()?)))?;
        Ok(WriteBack {
            ts,
            release,
            set_ts,
            items,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// One per item; `None` where the key does not exist.
    Tuples(Vec<Option<Tuple>>),
    /// Item `index` was held by `holder`; nothing stays locked.
    LockFailed {
        index: u32,
        holder: u64,
    },
    /// Item `index` does not exist; nothing stays locked.
    NotFound {
        index: u32,
    },
    /// Validation failed at item `index`.
    Invalid {
        index: u32,
    },
    Ok,
    /// The record was inserted at slot `loc` with `version` (a revived key's next one).
    Inserted {
        loc: Loc,
        version: u64,
    },
    /// The record was deleted; `version` is the deletion's (absent) version.
    Deleted {
        version: u64,
    },
    Duplicate,
    /// `(key, slot, version)` of each record a scan met: live ones, and deleted ones (their
    /// version has `VERSION_ABSENT`) on the way to `limit` live ones.
    Keys(Vec<(u64, u32, u64)>),
    /// An insert found every record slot of the table on this node used.
    Full,
    /// The request could not be decoded or named memory it may not touch.
    BadRequest,
    /// A protocol family's own reply (see [`Request::Family`]).
    Family {
        family: FamilyId,
        body: Vec<u8>,
    },
    /// One word of the node's memory ([`Request::LogHead`]).
    Word {
        value: u64,
    },
}

/// Declares a message tag enum: `#[repr(u8)]`, the list of every tag, their names, and a
/// `TryFrom<u64>` whose error names every accepted tag. The encoder writes `tag as u64` and
/// the decoder matches on `try_from`, so a tag's number is written once. Families use it for
/// their own messages.
#[macro_export]
macro_rules! wire_tags {
    ($(#[$m:meta])* $vis:vis enum $name:ident ($what:literal) {
        $($(#[$vm:meta])* $v:ident = $n:literal,)+
    }) => {
        $(#[$m])*
        #[repr(u8)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        $vis enum $name {
            $($(#[$vm])* $v = $n,)+
        }

        impl $name {
            /// Every tag, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$v,)+];

            pub fn name(self) -> &'static str {
                match self {
                    $($name::$v => stringify!($v),)+
                }
            }

            /// The accepted tags as `number Name` pairs, for error messages.
            pub fn accepted() -> String {
                Self::ALL
                    .iter()
                    .map(|t| format!("{} {}", *t as u8, t.name()))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        }

        impl From<$name> for u8 {
            fn from(t: $name) -> u8 {
                t as u8
            }
        }

        impl TryFrom<u64> for $name {
            type Error = $crate::msg::DecodeError;
            fn try_from(v: u64) -> Result<Self, Self::Error> {
                Self::ALL
                    .iter()
                    .copied()
                    .find(|t| *t as u64 == v)
                    .ok_or_else(|| {
                        $crate::msg::DecodeError(format!(
                            "unknown {} tag {v} (accepted: {})",
                            $what,
                            Self::accepted()
                        ))
                    })
            }
        }
    };
}

wire_tags! {
    /// The first word of every encoded [`Request`].
    pub enum RequestTag ("request") {
        Read = 1,
        Lock = 2,
        Validate = 3,
        Log = 4,
        WriteBack = 5,
        Release = 6,
        Insert = 7,
        Delete = 8,
        Scan = 9,
        UndoInsert = 10,
        Family = 11,
        LogHead = 12,
    }
}

wire_tags! {
    /// The first word of every encoded [`Reply`].
    pub enum ReplyTag ("reply") {
        Tuples = 1,
        LockFailed = 2,
        NotFound = 3,
        Invalid = 4,
        Ok = 5,
        Inserted = 6,
        Duplicate = 7,
        Keys = 8,
        BadRequest = 9,
        Deleted = 10,
        Full = 11,
        Family = 12,
        Word = 13,
    }
}

/// A malformed message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed message: {0}")]
pub struct DecodeError(pub String);

/// Writes a message as little-endian words (families encode their messages with it).
pub struct WordWriter<'a>(pub &'a mut Vec<u8>);

impl WordWriter<'_> {
    #[inline]
    pub fn w(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    #[inline]
    pub fn tag<T: Into<u8>>(&mut self, t: T) {
        self.w(t.into() as u64);
    }
    /// A length, then the words (room for all made once, the words copied as one run: a
    /// push per word was most of a 1000-byte record's encoding).
    pub fn words(&mut self, ws: &[u64]) {
        self.0.reserve((1 + ws.len()) * 8);
        self.w(ws.len() as u64);
        let start = self.0.len();
        self.0.resize(start + ws.len() * 8, 0);
        for (b, v) in self.0[start..].chunks_exact_mut(8).zip(ws) {
            b.copy_from_slice(&v.to_le_bytes());
        }
    }
    pub fn item(&mut self, i: &Item) {
        self.w(i.table.0 as u64);
        self.w(i.key);
        self.opt_loc(i.loc);
    }
    /// A location that may be unknown, in one word.
    pub fn opt_loc(&mut self, loc: Option<Loc>) {
        self.w(loc.map_or(NO_LOC_WORD, |l| l.0 as u64));
    }
    /// A length, then the items (room for all made once).
    pub fn items(&mut self, items: &[Item]) {
        self.0.reserve((1 + ITEM_WORDS * items.len()) * 8);
        self.w(items.len() as u64);
        items.iter().for_each(|i| self.item(i));
    }
}

/// Reads a message written by [`WordWriter`], checking every length and value; `what`
/// names the message in errors. A copy reads on from the same place (a first pass that
/// checks a request whole before a second acts on it).
#[derive(Clone)]
pub struct WordReader<'a> {
    b: &'a [u8],
    what: &'static str,
}

/// Longest variable part accepted, bounding what a malformed length can make us allocate.
const LEN_MAX: u64 = 1 << 20;

impl<'a> WordReader<'a> {
    pub fn new(b: &'a [u8], what: &'static str) -> Self {
        WordReader { b, what }
    }

    /// An error naming this message.
    pub fn error(&self, why: impl fmt::Display) -> DecodeError {
        DecodeError(format!("{}: {why}", self.what))
    }

    pub fn w(&mut self) -> Result<u64, DecodeError> {
        if self.b.len() < 8 {
            return Err(DecodeError(format!("{} truncated", self.what)));
        }
        let (h, t) = self.b.split_at(8);
        self.b = t;
        Ok(u64::from_le_bytes(h.try_into().expect("8 bytes")))
    }
    pub fn len(&mut self) -> Result<usize, DecodeError> {
        let n = self.w()?;
        if n > LEN_MAX {
            return Err(DecodeError(format!(
                "{}: length {n} over the limit {LEN_MAX}",
                self.what
            )));
        }
        // Every element takes at least one word, so a longer count cannot be honest.
        if n > (self.b.len() / 8) as u64 {
            return Err(DecodeError(format!(
                "{}: length {n} but only {} bytes left",
                self.what,
                self.b.len()
            )));
        }
        Ok(n as usize)
    }
    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        let v = self.w()?;
        u32::try_from(v)
            .map_err(|_| DecodeError(format!("{}: {v} does not fit 32 bits", self.what)))
    }
    pub fn table(&mut self) -> Result<TableId, DecodeError> {
        let v = self.w()?;
        u16::try_from(v)
            .map(TableId)
            .map_err(|_| DecodeError(format!("{}: table id {v} out of range", self.what)))
    }
    pub fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.w()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(DecodeError(format!("{}: {v} is not a boolean", self.what))),
        }
    }
    pub fn words(&mut self) -> Result<Words, DecodeError> {
        let ws = self.word_run()?;
        let mut out = Words::with_capacity(ws.len());
        out.extend(ws);
        Ok(out)
    }

    /// As [`Self::words`], the run's little-endian bytes where they lie.
    pub fn word_bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = self.len()?;
        let (h, t) = self.b.split_at(n * 8);
        self.b = t;
        Ok(h)
    }

    /// As [`Self::words`], into a `Vec` (for runs longer than `Words` holds inline).
    pub fn word_vec(&mut self) -> Result<Vec<u64>, DecodeError> {
        Ok(self.word_run()?.collect())
    }

    /// A length, then that many words, split off at once (`len` checked they remain), not
    /// word by word.
    fn word_run(&mut self) -> Result<impl ExactSizeIterator<Item = u64> + 'a, DecodeError> {
        let n = self.len()?;
        let (h, t) = self.b.split_at(n * 8);
        self.b = t;
        Ok(h.chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))))
    }
    pub fn items(&mut self) -> Result<Vec<Item>, DecodeError> {
        self.list(Self::item)
    }

    /// A length, then that many elements read by `f`, into a vector sized once (collecting
    /// `Result`s cannot size it: it regrew as it filled).
    pub fn list<T>(
        &mut self,
        mut f: impl FnMut(&mut Self) -> Result<T, DecodeError>,
    ) -> Result<Vec<T>, DecodeError> {
        let n = self.len()?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            out.push(f(self)?);
        }
        Ok(out)
    }
    pub fn item(&mut self) -> Result<Item, DecodeError> {
        Ok(Item {
            table: self.table()?,
            key: self.w()?,
            loc: self.opt_loc()?,
        })
    }
    /// A family id, then the family's body: the rest of the message, in whole words.
    pub fn family(&mut self) -> Result<(FamilyId, &'a [u8]), DecodeError> {
        let v = self.w()?;
        let family = u8::try_from(v)
            .map(FamilyId)
            .map_err(|_| self.error(format!("family id {v} out of range")))?;
        if self.b.len() % 8 != 0 {
            return Err(self.error(format!("family body of {} bytes", self.b.len())));
        }
        Ok((family, std::mem::take(&mut self.b)))
    }

    /// A location written by [`WordWriter::opt_loc`].
    pub fn opt_loc(&mut self) -> Result<Option<Loc>, DecodeError> {
        match self.w()? {
            NO_LOC_WORD => Ok(None),
            v => u32::try_from(v)
                .map(|l| Some(Loc(l)))
                .map_err(|_| self.error(format!("location {v} is neither a slot nor unknown"))),
        }
    }

    pub fn done(&self) -> Result<(), DecodeError> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(DecodeError(format!(
                "{}: {} trailing bytes",
                self.what,
                self.b.len()
            )))
        }
    }
}

/// Least capacity of a request's buffer. The fabric answers an RPC in its request's own
/// buffer (and a local RPC's reply gets the room its request had), so a request encoded into
/// a buffer sized for itself alone regrew when its reply was written: an allocation and a
/// copy, ~3 a SmallBank RPC transaction (issue #9). A reply of a few small tuples fits here.
pub const REQUEST_BUFFER_BYTES_MIN: usize = 512;

/// An empty buffer for a request of `len` bytes, with room for a typical reply.
pub fn request_buffer(len: usize) -> Vec<u8> {
    Vec::with_capacity(len.max(REQUEST_BUFFER_BYTES_MIN))
}

/// The bytes of a request of `family` whose body `body` writes: what [`Request::Family`]
/// encodes to, without building the body separately.
pub fn family_request(family: FamilyId, body: impl FnOnce(&mut WordWriter<'_>)) -> Vec<u8> {
    let mut v = request_buffer(0);
    let mut e = WordWriter(&mut v);
    e.tag(RequestTag::Family);
    e.w(family.0 as u64);
    body(&mut e);
    v
}

/// As [`family_request`], for a reply.
pub fn family_reply(family: FamilyId, body: impl FnOnce(&mut WordWriter<'_>)) -> Reply {
    let mut v = Vec::with_capacity(32);
    body(&mut WordWriter(&mut v));
    Reply::Family { family, body: v }
}

/// A request of a family, without copying its body: `Some((family, body))` when `b` is one.
pub fn split_family(b: &[u8]) -> Result<Option<(FamilyId, &[u8])>, DecodeError> {
    let mut d = WordReader::new(b, "request");
    match RequestTag::try_from(d.w()?)? {
        RequestTag::Family => d.family().map(Some),
        _ => Ok(None),
    }
}

impl Request {
    /// Bytes [`Request::encode`] appends: reserved up front, so encoding never regrows.
    pub fn encoded_len(&self) -> usize {
        let words = match self {
            Request::Read { items } => 2 + ITEM_WORDS * items.len(),
            Request::Lock { items, .. } => 5 + ITEM_WORDS * items.len(),
            Request::Validate { items, .. } => 3 + 3 * items.len(),
            Request::Log { words, .. } => 3 + words.len(),
            Request::LogHead { .. } => 2,
            Request::WriteBack(wb) => {
                5 + wb.items.iter().map(|(_, _, p)| 3 + p.len()).sum::<usize>()
            }
            Request::Release { items, .. } => 3 + 2 * items.len(),
            Request::Insert { payload, .. } => 5 + payload.len(),
            Request::Delete { .. } => 3,
            Request::UndoInsert { .. } => 4,
            Request::Scan { .. } => 6,
            Request::Family { body, .. } => 2 + body.len().div_ceil(8),
        };
        words * 8
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(self.encoded_len());
        let mut e = WordWriter(out);
        match self {
            Request::Read { items } => Self::encode_read(&mut e, items),
            Request::Lock {
                ts,
                want_data,
                freeze,
                items,
            } => Self::encode_lock(&mut e, *ts, *want_data, *freeze, items),
            Request::Validate { ts, items } => {
                e.tag(RequestTag::Validate);
                e.w(*ts);
                e.w(items.len() as u64);
                for (t, loc, v) in items {
                    e.w(t.0 as u64);
                    e.w(*loc as u64);
                    e.w(*v);
                }
            }
            Request::Log { offset, words } => Self::encode_log(&mut e, *offset, words),
            Request::LogHead { offset } => {
                e.tag(RequestTag::LogHead);
                e.w(*offset as u64);
            }
            Request::WriteBack(wb) => {
                e.tag(RequestTag::WriteBack);
                wb.encode(&mut e);
            }
            Request::Release { ts, items } => {
                e.tag(RequestTag::Release);
                e.w(*ts);
                e.w(items.len() as u64);
                for (t, loc) in items {
                    e.w(t.0 as u64);
                    e.w(*loc as u64);
                }
            }
            Request::Insert {
                ts,
                table,
                key,
                payload,
            } => {
                e.tag(RequestTag::Insert);
                e.w(*ts);
                e.w(table.0 as u64);
                e.w(*key);
                e.words(payload);
            }
            Request::Delete { table, key } => {
                e.tag(RequestTag::Delete);
                e.w(table.0 as u64);
                e.w(*key);
            }
            Request::UndoInsert { ts, table, key } => {
                e.tag(RequestTag::UndoInsert);
                e.w(*ts);
                e.w(table.0 as u64);
                e.w(*key);
            }
            Request::Scan {
                table,
                lo,
                hi,
                limit,
                reverse,
            } => {
                e.tag(RequestTag::Scan);
                e.w(table.0 as u64);
                e.w(*lo);
                e.w(*hi);
                e.w(*limit as u64);
                e.w(*reverse as u64);
            }
            Request::Family { family, body } => {
                e.tag(RequestTag::Family);
                e.w(family.0 as u64);
                e.0.extend_from_slice(body);
            }
        }
    }

    pub fn to_bytes(&self) -> Vec<u8> {
        let mut v = request_buffer(self.encoded_len());
        self.encode(&mut v);
        v
    }

    fn encode_read(e: &mut WordWriter<'_>, items: &[Item]) {
        e.tag(RequestTag::Read);
        e.items(items);
    }

    /// The bytes of `Request::Read { items }` from borrowed items (a stage names its
    /// records from its entries: no vector built per request only to be encoded).
    pub fn read_bytes(items: &[Item]) -> Vec<u8> {
        let mut v = request_buffer((2 + ITEM_WORDS * items.len()) * 8);
        Self::encode_read(&mut WordWriter(&mut v), items);
        v
    }

    fn encode_lock(e: &mut WordWriter<'_>, ts: u64, want_data: bool, freeze: bool, items: &[Item]) {
        e.tag(RequestTag::Lock);
        e.w(ts);
        e.w(want_data as u64);
        e.w(freeze as u64);
        e.items(items);
    }

    /// The bytes of `Request::Lock { .. }` from borrowed items (as [`Self::read_bytes`]).
    pub fn lock_bytes(ts: u64, want_data: bool, freeze: bool, items: &[Item]) -> Vec<u8> {
        let mut v = request_buffer((5 + ITEM_WORDS * items.len()) * 8);
        Self::encode_lock(&mut WordWriter(&mut v), ts, want_data, freeze, items);
        v
    }

    fn encode_log(e: &mut WordWriter<'_>, offset: u32, words: &[u64]) {
        e.tag(RequestTag::Log);
        e.w(offset as u64);
        e.words(words);
    }

    /// The bytes of `Request::Log { offset, words }` from borrowed words (a log record goes
    /// to every backup: no copy of it per backup).
    pub fn log_bytes(offset: u32, words: &[u64]) -> Vec<u8> {
        let mut v = request_buffer((3 + words.len()) * 8);
        Self::encode_log(&mut WordWriter(&mut v), offset, words);
        v
    }

    pub fn decode(b: &[u8]) -> Result<Request, DecodeError> {
        let mut d = WordReader::new(b, "request");
        let r = match RequestTag::try_from(d.w()?)? {
            RequestTag::Read => Request::Read { items: d.items()? },
            RequestTag::Lock => {
                let ts = d.w()?;
                let want_data = d.bool()?;
                let freeze = d.bool()?;
                Request::Lock {
                    ts,
                    want_data,
                    freeze,
                    items: d.items()?,
                }
            }
            RequestTag::Validate => {
                let ts = d.w()?;
                let items = d.list(|d| Ok((d.table()?, d.u32()?, d.w()?)))?;
                Request::Validate { ts, items }
            }
            RequestTag::Log => Request::Log {
                offset: d.u32()?,
                words: d.word_vec()?,
            },
            RequestTag::LogHead => Request::LogHead { offset: d.u32()? },
            RequestTag::WriteBack => Request::WriteBack(WriteBack::decode(&mut d)?),
            RequestTag::Release => {
                let ts = d.w()?;
                let items = d.list(|d| Ok((d.table()?, d.u32()?)))?;
                Request::Release { ts, items }
            }
            RequestTag::Insert => Request::Insert {
                ts: d.w()?,
                table: d.table()?,
                key: d.w()?,
                payload: d.words()?,
            },
            RequestTag::Delete => Request::Delete {
                table: d.table()?,
                key: d.w()?,
            },
            RequestTag::UndoInsert => Request::UndoInsert {
                ts: d.w()?,
                table: d.table()?,
                key: d.w()?,
            },
            RequestTag::Scan => Request::Scan {
                table: d.table()?,
                lo: d.w()?,
                hi: d.w()?,
                limit: d.u32()?,
                reverse: d.bool()?,
            },
            RequestTag::Family => {
                let (family, body) = d.family()?;
                Request::Family {
                    family,
                    body: body.to_vec(),
                }
            }
        };
        d.done()?;
        Ok(r)
    }
}

impl Reply {
    /// Bytes [`Reply::encode`] appends: reserved up front, so encoding never regrows.
    pub fn encoded_len(&self) -> usize {
        let words = match self {
            Reply::Tuples(ts) => {
                TUPLES_HEAD_WORDS
                    + ts.iter()
                        .map(|t| t.as_ref().map_or(1, |t| TUPLE_HEAD_WORDS + t.data.len()))
                        .sum::<usize>()
            }
            Reply::LockFailed { .. } | Reply::Inserted { .. } => 3,
            Reply::NotFound { .. }
            | Reply::Invalid { .. }
            | Reply::Deleted { .. }
            | Reply::Word { .. } => 2,
            Reply::Ok | Reply::Duplicate | Reply::BadRequest | Reply::Full => 1,
            Reply::Keys(ks) => 2 + 3 * ks.len(),
            Reply::Family { body, .. } => 2 + body.len().div_ceil(8),
        };
        words * 8
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(self.encoded_len());
        let mut e = WordWriter(out);
        match self {
            Reply::Tuples(ts) => {
                e.tag(ReplyTag::Tuples);
                e.w(ts.len() as u64);
                for t in ts {
                    match t {
                        None => e.w(0),
                        Some(t) => write_tuple(&mut e, &t.head(), &t.data),
                    }
                }
            }
            Reply::LockFailed { index, holder } => {
                e.tag(ReplyTag::LockFailed);
                e.w(*index as u64);
                e.w(*holder);
            }
            Reply::NotFound { index } => {
                e.tag(ReplyTag::NotFound);
                e.w(*index as u64);
            }
            Reply::Invalid { index } => {
                e.tag(ReplyTag::Invalid);
                e.w(*index as u64);
            }
            Reply::Ok => e.tag(ReplyTag::Ok),
            Reply::Inserted { loc, version } => {
                e.tag(ReplyTag::Inserted);
                e.w(loc.0 as u64);
                e.w(*version);
            }
            Reply::Deleted { version } => {
                e.tag(ReplyTag::Deleted);
                e.w(*version);
            }
            Reply::Duplicate => e.tag(ReplyTag::Duplicate),
            Reply::BadRequest => e.tag(ReplyTag::BadRequest),
            Reply::Full => e.tag(ReplyTag::Full),
            Reply::Word { value } => {
                e.tag(ReplyTag::Word);
                e.w(*value);
            }
            Reply::Keys(ks) => {
                e.tag(ReplyTag::Keys);
                e.w(ks.len() as u64);
                for (k, loc, version) in ks {
                    e.w(*k);
                    e.w(*loc as u64);
                    e.w(*version);
                }
            }
            Reply::Family { family, body } => {
                e.tag(ReplyTag::Family);
                e.w(family.0 as u64);
                e.0.extend_from_slice(body);
            }
        }
    }

    pub fn decode(b: &[u8]) -> Result<Reply, DecodeError> {
        let mut d = WordReader::new(b, "reply");
        let r = match ReplyTag::try_from(d.w()?)? {
            ReplyTag::Tuples => Reply::Tuples(d.list(|d| {
                Ok(match d.bool()? {
                    false => None,
                    true => Some(Tuple {
                        loc: Loc(d.u32()?),
                        lock: d.w()?,
                        version: d.w()?,
                        wts: d.w()?,
                        rts: d.w()?,
                        data: d.words()?,
                    }),
                })
            })?),
            ReplyTag::LockFailed => Reply::LockFailed {
                index: d.u32()?,
                holder: d.w()?,
            },
            ReplyTag::NotFound => Reply::NotFound { index: d.u32()? },
            ReplyTag::Invalid => Reply::Invalid { index: d.u32()? },
            ReplyTag::Ok => Reply::Ok,
            ReplyTag::Inserted => Reply::Inserted {
                loc: Loc(d.u32()?),
                version: d.w()?,
            },
            ReplyTag::Duplicate => Reply::Duplicate,
            ReplyTag::Keys => Reply::Keys(d.list(|d| Ok((d.w()?, d.u32()?, d.w()?)))?),
            ReplyTag::BadRequest => Reply::BadRequest,
            ReplyTag::Deleted => Reply::Deleted { version: d.w()? },
            ReplyTag::Family => {
                let (family, body) = d.family()?;
                Reply::Family {
                    family,
                    body: body.to_vec(),
                }
            }
            ReplyTag::Full => Reply::Full,
            ReplyTag::Word => Reply::Word { value: d.w()? },
        };
        d.done()?;
        Ok(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(r: Request) {
        let b = r.to_bytes();
        assert_eq!(b.len(), r.encoded_len(), "encoded length of {r:?}");
        assert_eq!(Request::decode(&b), Ok(r.clone()), "{r:?}");
        // Every strict prefix is malformed, never a panic.
        for cut in 0..b.len() {
            assert!(
                Request::decode(&b[..cut]).is_err(),
                "prefix {cut} of {r:?} decoded"
            );
        }
    }

    #[test]
    fn messages_round_trip_and_truncations_are_rejected() {
        let it = Item {
            table: TableId(3),
            key: 42,
            loc: None,
        };
        round_trip(Request::Read {
            items: vec![
                it,
                Item {
                    loc: Some(Loc(7)),
                    ..it
                },
            ],
        });
        round_trip(Request::Lock {
            ts: 99,
            want_data: true,
            freeze: true,
            items: vec![it],
        });
        // A family's body runs to the end of the message: the family's own decoder (which
        // reads it with `WordReader` and ends with `done`) rejects its truncations.
        let fam = Request::Family {
            family: FamilyId(3),
            body: 77u64.to_le_bytes().repeat(3),
        };
        assert_eq!(Request::decode(&fam.to_bytes()), Ok(fam.clone()));
        assert_eq!(
            split_family(&fam.to_bytes()),
            Ok(Some((FamilyId(3), &77u64.to_le_bytes().repeat(3)[..])))
        );
        assert!(Request::decode(&fam.to_bytes()[..20]).is_err());
        round_trip(Request::Validate {
            ts: 5,
            items: vec![(TableId(1), 2, 3)],
        });
        round_trip(Request::LogHead { offset: 12 });
        round_trip(Request::Log {
            offset: 10,
            words: vec![1, 2, 3],
        });
        round_trip(Request::WriteBack(WriteBack {
            ts: 1,
            release: false,
            set_ts: 12,
            items: vec![(TableId(0), 1, Words::from_slice(&[9, 8]))],
        }));
        round_trip(Request::Release {
            ts: 1,
            items: vec![(TableId(0), 1)],
        });
        round_trip(Request::Insert {
            ts: 3,
            table: TableId(2),
            key: 5,
            payload: Words::from_slice(&[1]),
        });
        round_trip(Request::UndoInsert {
            ts: 4,
            table: TableId(1),
            key: 9,
        });
        round_trip(Request::Delete {
            table: TableId(2),
            key: 5,
        });
        // A family body runs to the message's end (its family decodes and checks it), so
        // only its length and round trip are checked here, not its prefixes.
        let fam = Request::Family {
            family: FamilyId(2),
            body: [3u64, 4].iter().flat_map(|w| w.to_le_bytes()).collect(),
        };
        let b = fam.to_bytes();
        assert_eq!(b.len(), fam.encoded_len());
        assert_eq!(Request::decode(&b), Ok(fam));
        round_trip(Request::Scan {
            table: TableId(2),
            lo: 1,
            hi: 9,
            limit: 20,
            reverse: true,
        });
        let reply = Reply::Tuples(vec![
            None,
            Some(Tuple {
                loc: Loc(1),
                lock: 0,
                version: 4,
                wts: 6,
                rts: 7,
                data: Words::from_slice(&[5]),
            }),
        ]);
        let mut b = Vec::new();
        reply.encode(&mut b);
        assert_eq!(b.len(), reply.encoded_len(), "encoded length of {reply:?}");
        assert_eq!(Reply::decode(&b), Ok(reply));
        for reply in [
            Reply::LockFailed {
                index: 2,
                holder: 7,
            },
            Reply::NotFound { index: 1 },
            Reply::Invalid { index: 0 },
            Reply::Inserted {
                loc: Loc(3),
                version: 9,
            },
            Reply::Deleted { version: 8 },
            Reply::Word { value: 11 },
            Reply::Keys(vec![(1, 2, 3), (4, 5, 6)]),
            Reply::Duplicate,
            Reply::Full,
            Reply::BadRequest,
            Reply::Ok,
            Reply::Family {
                family: FamilyId(1),
                body: 5u64.to_le_bytes().to_vec(),
            },
        ] {
            let mut b = Vec::new();
            reply.encode(&mut b);
            assert_eq!(b.len(), reply.encoded_len(), "encoded length of {reply:?}");
            assert_eq!(Reply::decode(&b), Ok(reply));
        }
        assert!(Reply::decode(&14u64.to_le_bytes())
            .unwrap_err()
            .0
            .contains("unknown reply tag 14 (accepted: 1 Tuples, 2 LockFailed, 3 NotFound,"));
    }

    /// Every entry of a `Tuples` reply read in place, or the first error.
    fn read_in_place(b: &[u8]) -> Result<Vec<Option<Tuple>>, DecodeError> {
        let ReplyView::Tuples(mut r) = ReplyView::new(b)? else {
            return Err(DecodeError("not tuples".into()));
        };
        let mut out = Vec::new();
        while let Some(t) = r.next() {
            out.push(t?.map(|t| Tuple::from_parts(t.head, t.data().collect())));
        }
        Ok(out)
    }

    #[test]
    fn msg_a_tuples_reply_written_entry_by_entry_reads_in_place_as_it_decodes() {
        let head = TupleHead {
            loc: Loc(4),
            lock: 0,
            version: 9,
            wts: 2,
            rts: 3,
        };
        let mut b = Vec::new();
        let mut w = TuplesWriter::begin(&mut b, 3);
        w.tuple(&head, &[7, 8, 9]);
        w.none();
        w.tuple(&TupleHead { lock: 5, ..head }, &[]);
        w.finish();
        let decoded = Reply::decode(&b).expect("decodes");
        let Reply::Tuples(ts) = &decoded else {
            panic!("{decoded:?}")
        };
        assert_eq!(
            ts[0],
            Some(Tuple::from_parts(head, Words::from_slice(&[7, 8, 9])))
        );
        assert_eq!(ts[1], None);
        assert_eq!(read_in_place(&b), Ok(ts.clone()));
        let mut again = Vec::new();
        decoded.encode(&mut again);
        assert_eq!(again, b, "Reply::encode writes TuplesWriter's bytes");
        for cut in 0..b.len() {
            assert!(read_in_place(&b[..cut]).is_err(), "prefix {cut} read");
        }
        let mut long = b.clone();
        long.extend_from_slice(&[0; 8]);
        assert!(read_in_place(&long).is_err(), "a trailing word");
        assert!(matches!(
            ReplyView::new(&{
                let mut v = Vec::new();
                Reply::Ok.encode(&mut v);
                v
            }),
            Ok(ReplyView::Other(Reply::Ok))
        ));
        // Entries whose payloads are copied in place: the same bytes, an absent one too.
        let mut in_place = Vec::new();
        let mut w = TuplesWriter::begin(&mut in_place, 3);
        w.tuple_in_place(3, |out| {
            out.copy_from_slice(&[7u64, 8, 9].map(u64::to_le_bytes).concat());
            Some(head)
        });
        w.tuple_in_place(3, |out| {
            out.fill(0xee);
            None
        });
        w.tuple_in_place(0, |_| Some(TupleHead { lock: 5, ..head }));
        w.finish();
        assert_eq!(
            in_place, b,
            "tuple_in_place writes tuple's and none's bytes"
        );
    }

    #[test]
    fn every_tag_decodes_to_itself_and_unknown_ones_name_the_accepted() {
        for &t in RequestTag::ALL {
            assert_eq!(RequestTag::try_from(t as u64), Ok(t));
        }
        for &t in ReplyTag::ALL {
            assert_eq!(ReplyTag::try_from(t as u64), Ok(t));
        }
        let e = RequestTag::try_from(0).unwrap_err();
        assert!(
            e.0.contains("unknown request tag 0 (accepted: 1 Read, 2 Lock,"),
            "{e}"
        );
        assert!(
            e.0.ends_with(&format!("{})", RequestTag::accepted())),
            "{e}"
        );
    }

    #[test]
    fn malformed_messages_name_what_is_wrong() {
        let e = Request::decode(&77u64.to_le_bytes()).unwrap_err();
        assert!(e.0.contains("unknown request tag 77"), "{e}");
        let mut b = Request::Delete {
            table: TableId(1),
            key: 2,
        }
        .to_bytes();
        b.extend_from_slice(&[0; 8]);
        assert!(Request::decode(&b).unwrap_err().0.contains("trailing"));
        let mut huge = Vec::new();
        WordWriter(&mut huge).w(1);
        WordWriter(&mut huge).w(u64::MAX);
        assert!(Request::decode(&huge)
            .unwrap_err()
            .0
            .contains("over the limit"));
    }
}
