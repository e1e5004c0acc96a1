//! `MemRegion`: a buffer of `AtomicU64` words registered with a context (`ucp_mem_map`),
//! either an existing one or one UCX allocates (so that peers on this machine can map it),
//! and the `RegionDescriptor` a peer needs to reach it (base address, length, packed remote
//! key), encoded for the wire.

use crate::context::{Context, ContextInner};
use crate::error::{check, UcxError};
use crate::sys;
use std::ffi::c_void;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Bytes of a packed remote key a descriptor may carry: UCX's are well under 1 KiB per
/// transport; anything far larger is a corrupt descriptor.
pub const RKEY_BYTES_MAX: usize = 64 * 1024;

/// A registered buffer of words. Keeps the buffer's owner alive as long as the registration
/// lasts. Drop it only once no peer may write to it any more (its peers' endpoints closed):
/// UCX's CMA transport writes through `process_vm_writev` to the address a descriptor
/// names without checking that it is still registered (an RDMA NIC would refuse a revoked
/// key), so a late put would land in whatever the buffer's memory became.
pub struct MemRegion {
    memh: sys::ucp_mem_h,
    base: *const AtomicU64,
    len_words: usize,
    /// The words' owner when they are not UCX's (`map`); `None` when UCX allocated them
    /// (`allocate`) and frees them at the unmap.
    _owner: Option<Arc<dyn AsRef<[AtomicU64]> + Send + Sync>>,
    context: Arc<ContextInner>,
}

// SAFETY: the words are atomics (shared access from any thread is sound), the owner is Send +
// Sync, and mapping, packing and unmapping are context-level calls UCX makes thread-safe for
// a context created with mt_workers_shared (ours always are).
unsafe impl Send for MemRegion {}
// SAFETY: as for Send; &MemRegion only reads the words atomically or packs a key.
unsafe impl Sync for MemRegion {}

impl MemRegion {
    /// Registers the words `owner` holds. The words may be read and written by peers at any
    /// time until the region is dropped; local code sees them through [`MemRegion::words`].
    pub fn map<O>(context: &Context, owner: Arc<O>) -> Result<MemRegion, UcxError>
    where
        O: AsRef<[AtomicU64]> + Send + Sync + 'static,
    {
        let words: &[AtomicU64] = (*owner).as_ref();
        if words.is_empty() {
            return Err(UcxError::invalid(
                "ucp_mem_map",
                "an empty buffer cannot be registered",
            ));
        }
        let (base, len_words) = (words.as_ptr(), words.len());
        // SAFETY: an all-zero ucp_mem_map_params_t selects no field; we select ours.
        let mut params: sys::ucp_mem_map_params_t = unsafe { std::mem::zeroed() };
        params.field_mask =
            (sys::UCP_MEM_MAP_PARAM_FIELD_ADDRESS | sys::UCP_MEM_MAP_PARAM_FIELD_LENGTH) as u64;
        params.address = base as *mut c_void;
        params.length = (len_words * 8) as sys::size_t;
        let mut memh: sys::ucp_mem_h = std::ptr::null_mut();
        // SAFETY: the context is live; the address range is the owner's words, which the
        // region keeps alive (through its Arc) until it is unmapped.
        check("ucp_mem_map", unsafe {
            sys::ucp_mem_map(context.inner.handle, &params, &mut memh)
        })?;
        Ok(MemRegion {
            memh,
            base,
            len_words,
            _owner: Some(owner),
            context: context.inner.clone(),
        })
    }

    /// Registers `len_words` words that UCX allocates (`UCP_MEM_MAP_ALLOCATE`): through a
    /// shared-memory domain when the context has one (sysv, posix), whose remote keys let a
    /// peer on this machine map the words and reach them with loads, stores and CPU atomics
    /// (real RMA, [`crate::RemoteRegion::mapped`]); otherwise plain memory. The words' contents
    /// are unspecified: the caller zeroes them.
    pub fn allocate(context: &Context, len_words: usize) -> Result<MemRegion, UcxError> {
        let bytes = len_words.checked_mul(8).filter(|&b| b > 0).ok_or_else(|| {
            UcxError::invalid(
                "ucp_mem_map",
                format!("cannot allocate a region of {len_words} words"),
            )
        })?;
        // SAFETY: an all-zero ucp_mem_map_params_t selects no field; we select ours.
        let mut params: sys::ucp_mem_map_params_t = unsafe { std::mem::zeroed() };
        params.field_mask = (sys::UCP_MEM_MAP_PARAM_FIELD_ADDRESS
            | sys::UCP_MEM_MAP_PARAM_FIELD_LENGTH
            | sys::UCP_MEM_MAP_PARAM_FIELD_FLAGS) as u64;
        params.address = std::ptr::null_mut();
        params.length = bytes as sys::size_t;
        params.flags = sys::UCP_MEM_MAP_ALLOCATE;
        let mut memh: sys::ucp_mem_h = std::ptr::null_mut();
        // SAFETY: the context is live; UCX allocates the range and owns it until the unmap.
        check("ucp_mem_map", unsafe {
            sys::ucp_mem_map(context.inner.handle, &params, &mut memh)
        })?;
        // SAFETY: an all-zero ucp_mem_attr_t selects no field; we select ours.
        let mut attr: sys::ucp_mem_attr_t = unsafe { std::mem::zeroed() };
        attr.field_mask = (sys::UCP_MEM_ATTR_FIELD_ADDRESS | sys::UCP_MEM_ATTR_FIELD_LENGTH) as u64;
        // SAFETY: memh is live; attr is a valid out-parameter.
        let queried = check("ucp_mem_query", unsafe {
            sys::ucp_mem_query(memh, &mut attr)
        });
        let region = MemRegion {
            memh,
            base: attr.address as *const AtomicU64,
            len_words,
            _owner: None,
            context: context.inner.clone(),
        };
        queried?;
        if region.base.is_null() || region.base as usize % 8 != 0 || (attr.length as usize) < bytes
        {
            return Err(UcxError::invalid(
                "ucp_mem_query",
                format!(
                    "UCX allocated {} bytes at {:p} for {bytes} word-aligned bytes",
                    attr.length, region.base
                ),
            ));
        }
        Ok(region)
    }

    /// The registered words' first word.
    pub fn base(&self) -> std::ptr::NonNull<AtomicU64> {
        std::ptr::NonNull::new(self.base as *mut AtomicU64).expect("checked at registration")
    }

    /// The registered words, for this process's own accesses.
    pub fn words(&self) -> &[AtomicU64] {
        // SAFETY: base and len_words describe the slice the owner handed out, and the owner
        // is kept alive (and never handed out mutably: we hold one of its Arcs) by self.
        unsafe { std::slice::from_raw_parts(self.base, self.len_words) }
    }

    pub fn len_words(&self) -> usize {
        self.len_words
    }

    /// What a peer needs to reach this region: its address, length and packed remote key.
    pub fn descriptor(&self) -> Result<RegionDescriptor, UcxError> {
        let mut buf: *mut c_void = std::ptr::null_mut();
        let mut len: sys::size_t = 0;
        // SAFETY: context and memh are live; buf and len are valid out-pointers.
        check("ucp_rkey_pack", unsafe {
            sys::ucp_rkey_pack(self.context.handle, self.memh, &mut buf, &mut len)
        })?;
        // SAFETY: UCX returned len readable bytes at buf, released right after copying.
        let rkey = unsafe { std::slice::from_raw_parts(buf as *const u8, len as usize) }.to_vec();
        // SAFETY: buf came from ucp_rkey_pack and is released once.
        unsafe { sys::ucp_rkey_buffer_release(buf) };
        Ok(RegionDescriptor {
            base_addr: self.base as u64,
            len_words: self.len_words as u64,
            rkey,
        })
    }
}

impl Drop for MemRegion {
    fn drop(&mut self) {
        // SAFETY: memh came from ucp_mem_map on this context (kept alive by our Arc) and is
        // unmapped once; the words stay alive until after (the owner's Arc drops after).
        unsafe { sys::ucp_mem_unmap(self.context.handle, self.memh) };
    }
}

/// How a peer reaches a registered region.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionDescriptor {
    /// The region's first word, in its owner's address space.
    pub base_addr: u64,
    pub len_words: u64,
    /// `ucp_rkey_pack`'s bytes.
    pub rkey: Vec<u8>,
}

/// First word of an encoded descriptor (`b"atollrgn"`), so a stray buffer is refused.
const DESCRIPTOR_MAGIC: u64 = u64::from_le_bytes(*b"atollrgn");
/// Bytes before the key: magic, base, length in words, key length.
const DESCRIPTOR_HEADER_BYTES: usize = 8 * 4;

impl RegionDescriptor {
    /// Little-endian: magic, base address, length in words, key length, key bytes, checksum
    /// of all before it.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(DESCRIPTOR_HEADER_BYTES + self.rkey.len());
        for w in [
            DESCRIPTOR_MAGIC,
            self.base_addr,
            self.len_words,
            self.rkey.len() as u64,
        ] {
            out.extend_from_slice(&w.to_le_bytes());
        }
        out.extend_from_slice(&self.rkey);
        crate::wire::seal(&mut out);
        out
    }

    /// Decodes [`RegionDescriptor::to_bytes`]'s output, refusing anything else.
    pub fn from_bytes(bytes: &[u8]) -> Result<RegionDescriptor, UcxError> {
        let bad = |reason: String| UcxError::invalid("region descriptor", reason);
        let bytes =
            crate::wire::unseal(bytes).ok_or_else(|| bad("checksum missing or wrong".into()))?;
        if bytes.len() < DESCRIPTOR_HEADER_BYTES {
            return Err(bad(format!(
                "{} bytes, fewer than the {DESCRIPTOR_HEADER_BYTES} of its header",
                bytes.len()
            )));
        }
        let word = |i: usize| crate::wire::word(bytes, i);
        if word(0) != DESCRIPTOR_MAGIC {
            return Err(bad(format!(
                "starts with {:#018x}, not the descriptor magic",
                word(0)
            )));
        }
        let (base_addr, len_words, key_len) = (word(1), word(2), word(3));
        if len_words == 0 || base_addr % 8 != 0 {
            return Err(bad(format!(
                "region of {len_words} words at {base_addr:#x}: empty or not word-aligned"
            )));
        }
        let key_len_ok = usize::try_from(key_len).is_ok_and(|k| {
            (1..=RKEY_BYTES_MAX).contains(&k) && bytes.len() == DESCRIPTOR_HEADER_BYTES + k
        });
        if !key_len_ok {
            return Err(bad(format!(
                "announces a {key_len}-byte key (1..={RKEY_BYTES_MAX}) in {} bytes after its header",
                bytes.len() - DESCRIPTOR_HEADER_BYTES
            )));
        }
        Ok(RegionDescriptor {
            base_addr,
            len_words,
            rkey: bytes[DESCRIPTOR_HEADER_BYTES..].to_vec(),
        })
    }
}
