//! The framing of what travels between nodes at start-up (worker addresses, region
//! descriptors): a magic word, the fields, and a checksum over them, so a stray or damaged
//! buffer is refused before UCX, which parses its parts unchecked, ever sees it.

/// FNV-1a over `bytes`: not cryptographic, only a guard against damage and mix-ups (the
/// start-up exchange runs between trusted nodes).
pub(crate) fn checksum(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ *b as u64).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Appends the checksum of everything in `out` so far.
pub(crate) fn seal(out: &mut Vec<u8>) {
    let sum = checksum(out);
    out.extend_from_slice(&sum.to_le_bytes());
}

/// The bytes before a valid trailing checksum, or `None`.
pub(crate) fn unseal(bytes: &[u8]) -> Option<&[u8]> {
    let body_len = bytes.len().checked_sub(8)?;
    let (body, sum) = bytes.split_at(body_len);
    let mut w = [0u8; 8];
    w.copy_from_slice(sum);
    (checksum(body) == u64::from_le_bytes(w)).then_some(body)
}

/// Little-endian word `i` of `bytes`, which the caller sized.
pub(crate) fn word(bytes: &[u8], i: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
    u64::from_le_bytes(w)
}
