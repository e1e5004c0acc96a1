//! `Endpoint`: a connection from a worker to a peer's worker (`ucp_ep_create` from its
//! address, peer error handling so a dead peer fails ops instead of hanging them), the
//! active messages sent on it, and `RemoteRegion`: a peer's registered region reached
//! through it (unpacked remote key), with the one-sided ops: get, put, 64-bit CAS and
//! fetch-add, each bounds-checked against the region's announced length.

use crate::error::{check, UcxError};
use crate::memory::RegionDescriptor;
use crate::sys;
use crate::worker::{
    post, send_am, AmSendOptions, OpKind, OpState, PeerFailure, Worker, WorkerAddress, WorkerInner,
};
use std::cell::Cell;
use std::ffi::c_void;
use std::rc::Rc;
use std::time::{Duration, Instant};

/// How long dropping an endpoint progresses its worker for the close to finish; a close
/// still pending then is left to UCX (and its small error state leaked, as UCX might
/// still report to it).
pub const CLOSE_WAIT_MS_MAX: u64 = 1000;

/// A connection to one peer worker. Ops posted on it complete through its worker's queue.
/// Dropping it closes it at once (`UCP_EP_CLOSE_FLAG_FORCE`: ops still in flight complete
/// as cancelled; call [`Endpoint::flush`] first to let them finish).
pub struct Endpoint {
    inner: Rc<EndpointInner>,
}

pub(crate) struct EndpointInner {
    handle: sys::ucp_ep_h,
    /// Set by UCX's error handler when the peer fails; boxed so its address stays put.
    failure: *mut Cell<sys::ucs_status_t>,
    worker: Rc<WorkerInner>,
}

impl EndpointInner {
    fn failed(&self, op: &'static str) -> Result<(), UcxError> {
        // SAFETY: failure is freed only in drop (or leaked), never while self lives.
        let status = unsafe { (*self.failure).get() };
        if status == sys::UCS_OK {
            Ok(())
        } else {
            Err(UcxError::EndpointFailed {
                op,
                status: crate::error::status_string(status),
            })
        }
    }
}

impl Drop for EndpointInner {
    fn drop(&mut self) {
        // SAFETY: an all-zero ucp_request_param_t selects no field; we select ours.
        let mut param: sys::ucp_request_param_t = unsafe { std::mem::zeroed() };
        param.op_attr_mask = sys::UCP_OP_ATTR_FIELD_FLAGS;
        param.flags = sys::UCP_EP_CLOSE_FLAG_FORCE;
        // SAFETY: the endpoint is live and closed once; no remote key of it is left (each
        // holds an Rc of this endpoint).
        let request = unsafe { sys::ucp_ep_close_nbx(self.handle, &param) };
        let mut closed = true;
        if !request.is_null() && !crate::worker::ptr_is_err(request) {
            let start = Instant::now();
            let wait = Duration::from_millis(CLOSE_WAIT_MS_MAX);
            // SAFETY: request is a live UCX request until freed below.
            while unsafe { sys::ucp_request_check_status(request) } == sys::UCS_INPROGRESS {
                if start.elapsed() > wait {
                    closed = false;
                    break;
                }
                self.worker.progress();
            }
            // SAFETY: freed once; if still in flight UCX frees it when it completes.
            unsafe { sys::ucp_request_free(request) };
        }
        if closed {
            // SAFETY: from Box::into_raw in connect; the endpoint is closed, so UCX no
            // longer calls its error handler.
            drop(unsafe { Box::from_raw(self.failure) });
        }
    }
}

/// UCX's error handler: the peer of this endpoint failed (or the link did).
unsafe extern "C" fn ep_error_callback(
    arg: *mut c_void,
    _ep: sys::ucp_ep_h,
    status: sys::ucs_status_t,
) {
    // SAFETY: arg is the endpoint's failure cell, alive until the endpoint is closed.
    let failure = unsafe { &*(arg as *const Cell<sys::ucs_status_t>) };
    failure.set(if status == sys::UCS_OK {
        sys::UCS_ERR_CONNECTION_RESET
    } else {
        status
    });
}

impl Endpoint {
    pub(crate) fn connect(
        worker: &Rc<WorkerInner>,
        peer: &WorkerAddress,
        failure_mode: PeerFailure,
    ) -> Result<Endpoint, UcxError> {
        let failure = Box::into_raw(Box::new(Cell::new(sys::UCS_OK)));
        // SAFETY: an all-zero ucp_ep_params_t selects no field; we select ours.
        let mut params: sys::ucp_ep_params_t = unsafe { std::mem::zeroed() };
        params.field_mask = (sys::UCP_EP_PARAM_FIELD_REMOTE_ADDRESS
            | sys::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE
            | sys::UCP_EP_PARAM_FIELD_ERR_HANDLER) as u64;
        params.address = peer.0.as_ptr() as *const sys::ucp_address_t;
        params.err_mode = match failure_mode {
            PeerFailure::Report => sys::UCP_ERR_HANDLING_MODE_PEER,
            PeerFailure::Ignore => sys::UCP_ERR_HANDLING_MODE_NONE,
        };
        params.err_handler.cb = Some(ep_error_callback);
        params.err_handler.arg = failure as *mut c_void;
        let mut handle: sys::ucp_ep_h = std::ptr::null_mut();
        // SAFETY: the worker is live; the address bytes came from a peer's
        // ucp_worker_get_address (WorkerAddress's contract) and outlive the call; the
        // handler's arg lives until the endpoint is closed.
        let code = unsafe { sys::ucp_ep_create(worker.handle, &params, &mut handle) };
        if code != sys::UCS_OK {
            // SAFETY: UCX refused the endpoint and keeps no pointer to the cell.
            drop(unsafe { Box::from_raw(failure) });
            return Err(UcxError::status("ucp_ep_create", code));
        }
        Ok(Endpoint {
            inner: Rc::new(EndpointInner {
                handle,
                failure,
                worker: worker.clone(),
            }),
        })
    }

    /// The peer's failure, once UCX reported it.
    pub fn failure(&self) -> Option<UcxError> {
        self.inner.failed("endpoint").err()
    }

    /// Reaches a peer's registered region through this endpoint (`ucp_ep_rkey_unpack`).
    pub fn attach(&self, region: &RegionDescriptor) -> Result<RemoteRegion, UcxError> {
        self.inner.failed("ucp_ep_rkey_unpack")?;
        let mut rkey: sys::ucp_rkey_h = std::ptr::null_mut();
        // SAFETY: the endpoint is live; the key bytes outlive the call (UCX copies what it
        // needs) and came from a peer's ucp_rkey_pack (RegionDescriptor's contract).
        check("ucp_ep_rkey_unpack", unsafe {
            sys::ucp_ep_rkey_unpack(
                self.inner.handle,
                region.rkey.as_ptr() as *const c_void,
                &mut rkey,
            )
        })?;
        Ok(RemoteRegion {
            inner: Rc::new(RemoteKeyInner {
                rkey,
                base_addr: region.base_addr,
                len_words: region.len_words,
                ep: self.inner.clone(),
            }),
        })
    }

    /// Sends active message `id` (`ucp_am_send_nbx`); completes with `token` once the
    /// buffers may be reused (not when the peer handled it: a reply says that).
    pub fn am_send(
        &self,
        id: u16,
        header: Vec<u8>,
        data: Vec<u8>,
        options: AmSendOptions,
        token: u64,
    ) -> Result<(), UcxError> {
        self.inner.failed("ucp_am_send_nbx")?;
        send_am(
            &self.inner.worker,
            self.inner.handle,
            id,
            header,
            data,
            options,
            token,
        )
    }

    /// Completes (with `token`) once every op posted on this endpoint before it is complete
    /// at the peer (`ucp_ep_flush_nbx`).
    pub fn flush(&self, token: u64) -> Result<(), UcxError> {
        self.inner.failed("ucp_ep_flush_nbx")?;
        let op = Box::new(OpState {
            token,
            shared: self.inner.worker.shared,
            kind: OpKind::Flush,
            _remote: None,
            op: "ucp_ep_flush_nbx",
        });
        let handle = self.inner.handle;
        post(&self.inner.worker, op, 0, |param, _| {
            // SAFETY: the endpoint is live; param is valid for the call.
            unsafe { sys::ucp_ep_flush_nbx(handle, param) }
        })
    }
}

/// A peer's registered region, reached through one endpoint.
pub struct RemoteRegion {
    inner: Rc<RemoteKeyInner>,
}

pub(crate) struct RemoteKeyInner {
    rkey: sys::ucp_rkey_h,
    base_addr: u64,
    len_words: u64,
    ep: Rc<EndpointInner>,
}

impl Drop for RemoteKeyInner {
    fn drop(&mut self) {
        // SAFETY: rkey came from ucp_ep_rkey_unpack on ep, which is still open (we hold its
        // Rc), and no op uses it any more (each in-flight op holds an Rc of this key).
        unsafe { sys::ucp_rkey_destroy(self.rkey) };
    }
}

impl RemoteRegion {
    pub fn len_words(&self) -> u64 {
        self.inner.len_words
    }

    /// The peer's words are mapped into this process (`ucp_rkey_ptr`): UCX reaches them with
    /// this CPU's loads, stores and atomics, the target's CPU never involved (real RMA over
    /// shared memory). False for words a peer did not let UCX allocate, and over tcp.
    pub fn mapped(&self) -> bool {
        self.mapped_words().is_some()
    }

    /// Where the peer's first word is mapped into this process, if it is (see
    /// [`RemoteRegion::mapped`]); valid for [`RemoteRegion::len_words`] words for as long
    /// as this key lives.
    pub fn mapped_words(&self) -> Option<std::ptr::NonNull<std::sync::atomic::AtomicU64>> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: the key is live (we hold it); UCX only writes the out-pointer.
        let status = unsafe { sys::ucp_rkey_ptr(self.inner.rkey, self.inner.base_addr, &mut p) };
        if status != sys::UCS_OK || p as usize % 8 != 0 {
            return None;
        }
        std::ptr::NonNull::new(p as *mut std::sync::atomic::AtomicU64)
    }

    /// Refuses an access of `len_words` at `offset_words` beyond the region, or over a failed
    /// endpoint: what every op checks before UCX sees it, for ops carried another way.
    pub fn check(
        &self,
        op: &'static str,
        offset_words: u64,
        len_words: u64,
    ) -> Result<(), UcxError> {
        self.address(op, offset_words, len_words).map(|_| ())
    }

    /// The remote address of `offset_words`, refusing accesses beyond the region.
    fn address(
        &self,
        op: &'static str,
        offset_words: u64,
        len_words: u64,
    ) -> Result<u64, UcxError> {
        self.inner.ep.failed(op)?;
        let end = offset_words.checked_add(len_words);
        if len_words == 0 || end.is_none_or(|e| e > self.inner.len_words) {
            return Err(UcxError::OutOfBounds {
                op,
                offset_words,
                len_words,
                region_words: self.inner.len_words,
            });
        }
        Ok(self.inner.base_addr + offset_words * 8)
    }

    fn op(&self, token: u64, kind: OpKind, op: &'static str) -> Box<OpState> {
        Box::new(OpState {
            token,
            shared: self.inner.ep.worker.shared,
            kind,
            _remote: Some(self.inner.clone()),
            op,
        })
    }

    /// Reads `len_words` words at `offset_words` (`ucp_get_nbx`); completes with
    /// [`Outcome::Words`](crate::Outcome::Words).
    pub fn get(&self, offset_words: u64, len_words: u64, token: u64) -> Result<(), UcxError> {
        let remote = self.address("ucp_get_nbx", offset_words, len_words)?;
        let mut buf = vec![0u64; len_words as usize];
        // The vector's heap buffer stays put when the vector moves into the op state.
        let (ptr, bytes) = (buf.as_mut_ptr(), buf.len() * 8);
        let op = self.op(token, OpKind::Get(buf), "ucp_get_nbx");
        let (ep, rkey) = (self.inner.ep.handle, self.inner.rkey);
        post(&self.inner.ep.worker, op, 0, |param, _| {
            // SAFETY: ep and rkey are live (the op holds the key's Rc); the buffer is the
            // op state's vector, which UCX owns until the callback.
            unsafe {
                sys::ucp_get_nbx(
                    ep,
                    ptr as *mut c_void,
                    bytes as sys::size_t,
                    remote,
                    rkey,
                    param,
                )
            }
        })
    }

    /// Writes `data` at `offset_words` (`ucp_put_nbx`). Multi-word puts are not atomic as a
    /// whole (as RDMA WRITE).
    pub fn put(&self, offset_words: u64, data: Vec<u64>, token: u64) -> Result<(), UcxError> {
        let remote = self.address("ucp_put_nbx", offset_words, data.len() as u64)?;
        let (ptr, bytes) = (data.as_ptr(), data.len() * 8);
        let op = self.op(token, OpKind::Put { _data: data }, "ucp_put_nbx");
        let (ep, rkey) = (self.inner.ep.handle, self.inner.rkey);
        post(&self.inner.ep.worker, op, 0, |param, _| {
            // SAFETY: as for get; the data vector moved into the op state without moving
            // its heap buffer.
            unsafe {
                sys::ucp_put_nbx(
                    ep,
                    ptr as *const c_void,
                    bytes as sys::size_t,
                    remote,
                    rkey,
                    param,
                )
            }
        })
    }

    /// Swaps the word at `offset_words` to `new` if it holds `expect`
    /// (`UCP_ATOMIC_OP_CSWAP`); completes with the value it held, [`Outcome::Old`](crate::Outcome::Old).
    ///
    /// Over tcp, UCX 1.13 emulates the atomics (`amo_am`), and one still outstanding when the
    /// endpoint fails can crash the process in `ucp_ep_reqs_purge` (seen 8 times in 200 runs
    /// of this crate's tests). The engine's transport therefore carries its atomics over tcp
    /// as its own active messages; these are for transports that do them in hardware or
    /// shared memory.
    pub fn atomic_cswap64(
        &self,
        offset_words: u64,
        expect: u64,
        new: u64,
        token: u64,
    ) -> Result<(), UcxError> {
        // UCX's CSWAP compares with `buffer` and swaps in `reply_buffer`'s value, which then
        // receives the old one.
        self.atomic(
            sys::UCP_ATOMIC_OP_CSWAP,
            "ucp_atomic_op_nbx(cswap)",
            offset_words,
            expect,
            new,
            token,
        )
    }

    /// Adds `add` to the word at `offset_words` (`UCP_ATOMIC_OP_ADD` with a reply buffer);
    /// completes with the value before, [`Outcome::Old`](crate::Outcome::Old).
    pub fn atomic_fetch_add64(
        &self,
        offset_words: u64,
        add: u64,
        token: u64,
    ) -> Result<(), UcxError> {
        self.atomic(
            sys::UCP_ATOMIC_OP_ADD,
            "ucp_atomic_op_nbx(add)",
            offset_words,
            add,
            0,
            token,
        )
    }

    fn atomic(
        &self,
        opcode: sys::ucp_atomic_op_t,
        name: &'static str,
        offset_words: u64,
        operand: u64,
        reply: u64,
        token: u64,
    ) -> Result<(), UcxError> {
        let remote = self.address(name, offset_words, 1)?;
        let op = self.op(token, OpKind::Atomic { operand, reply }, name);
        let (ep, rkey) = (self.inner.ep.handle, self.inner.rkey);
        post(&self.inner.ep.worker, op, 0, |param, raw| {
            // SAFETY: raw is the op state UCX owns from this call on; its operand word does
            // not move (it is boxed) and nothing else touches it until the callback.
            let operand = unsafe { std::ptr::addr_of!((*raw).kind) };
            // SAFETY: as above; the kind was built as Atomic just before.
            let buffer = match unsafe { &*operand } {
                OpKind::Atomic { operand, .. } => operand as *const u64,
                _ => std::ptr::null(),
            };
            // SAFETY: ep and rkey are live; buffer and param.reply_buffer (set by post) are
            // the op state's words; count 1 of the 64-bit datatype post selected.
            unsafe {
                sys::ucp_atomic_op_nbx(ep, opcode, buffer as *const c_void, 1, remote, rkey, param)
            }
        })
    }
}

// Connecting lives with the endpoint it makes, so that the worker module names no endpoint.
impl Worker {
    /// Connects to a peer's worker, reporting its failure when the context's transports can
    /// ([`Transports::reports_peer_failure`](crate::Transports::reports_peer_failure)): then ops on the endpoint fail, rather than
    /// hang, once the peer is gone.
    pub fn connect(&self, peer: &WorkerAddress) -> Result<Endpoint, UcxError> {
        let failure = if self.inner._context.transports.reports_peer_failure() {
            PeerFailure::Report
        } else {
            PeerFailure::Ignore
        };
        Endpoint::connect(&self.inner, peer, failure)
    }

    /// [`Worker::connect`] with the peer-failure mode chosen by the caller.
    pub fn connect_with(
        &self,
        peer: &WorkerAddress,
        failure: PeerFailure,
    ) -> Result<Endpoint, UcxError> {
        Endpoint::connect(&self.inner, peer, failure)
    }
}
