//! Keys and values beyond words: byte keys placed by their hash with their bytes at the
//! record's head, and typed values encoded as CBOR into a record's words.

use crate::schema::{words_for_bytes, TableMeta};

/// A record's key: a `u64`, or bytes for a table declared with [`crate::Table::byte_keys`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key<'k> {
    Int(u64),
    Bytes(&'k [u8]),
}

impl From<u64> for Key<'_> {
    fn from(k: u64) -> Self {
        Key::Int(k)
    }
}

impl<'k> From<&'k [u8]> for Key<'k> {
    fn from(k: &'k [u8]) -> Self {
        Key::Bytes(k)
    }
}

impl<'k, const N: usize> From<&'k [u8; N]> for Key<'k> {
    fn from(k: &'k [u8; N]) -> Self {
        Key::Bytes(k)
    }
}

impl<'k> From<&'k str> for Key<'k> {
    fn from(k: &'k str) -> Self {
        Key::Bytes(k.as_bytes())
    }
}

impl<'k> From<&'k String> for Key<'k> {
    fn from(k: &'k String) -> Self {
        Key::Bytes(k.as_bytes())
    }
}

impl std::fmt::Display for Key<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::Int(k) => write!(f, "{k}"),
            Key::Bytes(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
        }
    }
}

/// The keys a transaction declares before it runs ([`crate::Db::transact_declared`]): every
/// record it will read, and those it will write. An access outside them is refused
/// ([`crate::TxError::Misuse`]), and a declared transaction cannot scan (a scan's keys are
/// not known before it runs). A deterministic protocol (CALVIN) orders transactions by
/// these sets before running them.
#[derive(Clone, Debug, Default)]
pub struct Declared {
    keys: Vec<(u16, OwnedKey, bool)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum OwnedKey {
    Int(u64),
    Bytes(Vec<u8>),
}

impl Declared {
    pub fn new() -> Declared {
        Declared::default()
    }

    /// `key` of `t` will be read (and not written).
    pub fn read<'k>(mut self, t: atoll_storage::TableId, key: impl Into<Key<'k>>) -> Declared {
        self.keys.push((t.0, OwnedKey::from(key.into()), false));
        self
    }

    /// `key` of `t` will be written (put, inserted, deleted or read for update), and may be
    /// read.
    pub fn write<'k>(mut self, t: atoll_storage::TableId, key: impl Into<Key<'k>>) -> Declared {
        self.keys.push((t.0, OwnedKey::from(key.into()), true));
        self
    }

    /// The declared keys as the engine keys them in `tables`: `(table, key, written)`.
    pub(crate) fn resolve(&self, tables: &[TableMeta]) -> Result<Vec<(u16, u64, bool)>, String> {
        self.keys
            .iter()
            .map(|(t, k, w)| {
                let meta = tables
                    .get(*t as usize)
                    .ok_or_else(|| format!("declared table id {t} names no table"))?;
                let key = match k {
                    OwnedKey::Int(k) => Key::Int(*k),
                    OwnedKey::Bytes(b) => Key::Bytes(b),
                };
                Ok((*t, locate(*t, meta, key)?.0, *w))
            })
            .collect()
    }
}

impl From<Key<'_>> for OwnedKey {
    fn from(k: Key<'_>) -> Self {
        match k {
            Key::Int(k) => OwnedKey::Int(k),
            Key::Bytes(b) => OwnedKey::Bytes(b.to_vec()),
        }
    }
}

/// Where `key` lives in table `t` (`meta`): the engine's key, and the words at the head of
/// its record that name it (none for a 64-bit key). A key of the other kind, or too long,
/// is refused with why.
pub(crate) fn locate(t: u16, meta: &TableMeta, key: Key<'_>) -> Result<(u64, Vec<u64>), String> {
    match (key, meta.key_hash) {
        (Key::Int(k), None) => Ok((k, Vec::new())),
        (Key::Bytes(b), Some(hash)) => {
            let bytes_max = (meta.key_words - 1) * 8;
            if b.len() > bytes_max as usize {
                return Err(format!(
                    "table {t}: a key of {} bytes, over the table's {bytes_max} (Table::byte_keys)",
                    b.len()
                ));
            }
            Ok((hash(b), pack(b, meta.key_words)))
        }
        (Key::Int(k), Some(_)) => Err(format!(
            "table {t} has byte keys: key {k} is a u64 (use a &str or &[u8] key with the _by or _as methods)"
        )),
        (Key::Bytes(_), None) => Err(format!(
            "table {t} has u64 keys, not byte keys (declare them with Table::byte_keys)"
        )),
    }
}

/// `bytes` behind their length, in `words` words (zero-padded).
pub(crate) fn pack(bytes: &[u8], words: u32) -> Vec<u64> {
    let mut out = vec![0u64; words as usize];
    out[0] = bytes.len() as u64;
    for (i, chunk) in bytes.chunks(8).enumerate() {
        let mut w = [0u8; 8];
        w[..chunk.len()].copy_from_slice(chunk);
        out[1 + i] = u64::from_le_bytes(w);
    }
    out
}

/// The bytes [`pack`] put in `words`, if its length word fits them.
pub(crate) fn unpack(words: &[u64]) -> Option<Vec<u8>> {
    let (&len, rest) = words.split_first()?;
    let len = usize::try_from(len).ok().filter(|&l| l <= rest.len() * 8)?;
    let mut out: Vec<u8> = rest.iter().flat_map(|w| w.to_le_bytes()).collect();
    out.truncate(len);
    Some(out)
}

/// `value` encoded for a typed table of `meta`: its words, or why it does not fit.
pub(crate) fn encode<T: serde::Serialize + ?Sized>(
    t: u16,
    meta: &TableMeta,
    value: &T,
) -> Result<Vec<u64>, String> {
    let Some(bytes_max) = meta.typed_bytes_max else {
        return Err(format!(
            "table {t} is not typed: declare it with Table::typed to use the _as methods"
        ));
    };
    let mut bytes = Vec::new();
    ciborium::into_writer(value, &mut bytes)
        .map_err(|e| format!("table {t}: the value does not encode: {e}"))?;
    if bytes.len() > bytes_max as usize {
        return Err(format!(
            "table {t}: the value encodes to {} bytes, over the table's {bytes_max} (Table::typed)",
            bytes.len()
        ));
    }
    debug_assert_eq!(words_for_bytes(bytes_max), meta.value_words);
    Ok(pack(&bytes, meta.value_words))
}

/// A typed table's value from its record's words.
pub(crate) fn decode<T: serde::de::DeserializeOwned>(
    t: u16,
    meta: &TableMeta,
    words: &[u64],
) -> Result<T, String> {
    if meta.typed_bytes_max.is_none() {
        return Err(format!(
            "table {t} is not typed: declare it with Table::typed to use the _as methods"
        ));
    }
    let bytes = unpack(words).ok_or_else(|| {
        format!("table {t}: the record holds no encoded value (a length word over its words)")
    })?;
    ciborium::from_reader(&bytes[..])
        .map_err(|e| format!("table {t}: the record does not decode as the type asked for: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_bytes_packed_behind_their_length_unpack_to_themselves() {
        for len in [0usize, 1, 7, 8, 9, 63] {
            let b: Vec<u8> = (0..len as u8).collect();
            let w = pack(&b, words_for_bytes(64));
            assert_eq!(unpack(&w).unwrap(), b);
        }
        // A length word over the words that follow is no value.
        assert_eq!(unpack(&[17, 0, 0]), None);
        assert_eq!(unpack(&[]), None);
    }
}
