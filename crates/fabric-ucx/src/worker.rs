//! `Worker`: one UCX worker (`ucp_worker_create`, single-threaded mode) with the two queues
//! its owner's event loop drains: completions of the non-blocking ops posted through it
//! (each tagged with the caller's token), and received active messages.
//!
//! UCX calls our callbacks only from inside `ucp_worker_progress` (and from closing an
//! endpoint or destroying the worker), on the owning thread; they only push onto the queues,
//! so no user code and no Rust reference counting runs inside UCX.

use crate::context::{Context, ContextInner};
use crate::error::{check, UcxError};
use crate::sys;
use std::cell::Cell;
use std::collections::VecDeque;
use std::ffi::c_void;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Received active messages a worker holds for its event loop by default.
pub const AM_INBOX_MESSAGES_DEFAULT: usize = 4096;

/// How to make a [`Worker`].
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// Received active messages held until the event loop takes them (received and in
    /// flight rendezvous ones together). Beyond it an eager message is dropped and counted
    /// ([`Worker::am_dropped`]), a rendezvous one refused (its sender completes with an
    /// error): size it by the requests peers may have outstanding.
    pub am_inbox_messages_max: usize,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            am_inbox_messages_max: AM_INBOX_MESSAGES_DEFAULT,
        }
    }
}

/// The opaque address of a worker, which a peer's [`Worker::connect`] takes. UCX parses the
/// address unchecked, so it travels framed ([`WorkerAddress::to_bytes`]: magic, length,
/// checksum) and only a frame that checks out is accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerAddress(pub(crate) Vec<u8>);

/// First word of an encoded worker address (`b"atollwad"`).
const ADDRESS_MAGIC: u64 = u64::from_le_bytes(*b"atollwad");
/// Bytes of UCX's worker address we accept: a few hundred per transport in UCX 1.13.
pub const WORKER_ADDRESS_BYTES_MAX: usize = 64 * 1024;

impl WorkerAddress {
    /// Little-endian: magic, length, UCX's address bytes, checksum of all before it.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + self.0.len());
        out.extend_from_slice(&ADDRESS_MAGIC.to_le_bytes());
        out.extend_from_slice(&(self.0.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.0);
        crate::wire::seal(&mut out);
        out
    }

    /// Decodes [`WorkerAddress::to_bytes`]'s output, refusing anything else.
    pub fn from_bytes(bytes: &[u8]) -> Result<WorkerAddress, UcxError> {
        let bad = |reason: &str| UcxError::invalid("worker address", reason);
        let body = crate::wire::unseal(bytes).ok_or_else(|| bad("checksum missing or wrong"))?;
        if body.len() < 16 || crate::wire::word(body, 0) != ADDRESS_MAGIC {
            return Err(bad("not an encoded worker address (magic)"));
        }
        let len = crate::wire::word(body, 1);
        let len_ok = usize::try_from(len)
            .is_ok_and(|n| (1..=WORKER_ADDRESS_BYTES_MAX).contains(&n) && body.len() == 16 + n);
        if !len_ok {
            return Err(bad("announced length disagrees with the bytes"));
        }
        Ok(WorkerAddress(body[16..].to_vec()))
    }
}

/// What a completed op produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A put, an active message sent, a flush.
    Done,
    /// A get: the words read.
    Words(Vec<u64>),
    /// An atomic: the word's value before it.
    Old(u64),
}

/// One finished op, with the token it was posted with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    pub token: u64,
    pub result: Result<Outcome, UcxError>,
}

/// A received active message.
#[derive(Debug)]
pub struct AmMessage {
    pub id: u16,
    pub header: Vec<u8>,
    pub data: Vec<u8>,
    /// How to answer it, when its sender asked for a reply endpoint.
    pub reply: Option<ReplyEp>,
    /// Whether it arrived by rendezvous (fetched by `ucp_am_recv_data_nbx`) rather than eagerly.
    pub rendezvous: bool,
}

/// The endpoint UCX handed with a message for answering it. Valid only until the receiving
/// worker progresses again: UCX may retire its internal endpoints while it progresses, so
/// [`Worker::am_reply`] refuses a handle from an earlier progress call (an event loop that
/// answers later names its peer in the request's header and replies on its own
/// [`Endpoint`]).
#[derive(Debug)]
pub struct ReplyEp {
    ep: sys::ucp_ep_h,
    shared: *const Shared,
    epoch: u64,
}

/// Heap state of one posted op: what UCX reads from or writes into until the op completes,
/// and what keeps its remote key alive. Owned by UCX (through `user_data`) while in flight.
pub(crate) struct OpState {
    pub(crate) token: u64,
    pub(crate) shared: *const Shared,
    pub(crate) kind: OpKind,
    /// Keeps the remote key (and through it the endpoint) alive while UCX may still use it.
    /// What the op's target memory needs alive until it completes (the remote key it
    /// addresses): held, never read, so this module need not know the key's type.
    pub(crate) _remote: Option<Rc<dyn std::any::Any>>,
    /// The op name for errors.
    pub(crate) op: &'static str,
}

pub(crate) enum OpKind {
    Get(Vec<u64>),
    Put {
        _data: Vec<u64>,
    },
    /// `operand` is UCX's `buffer` (the add, or CAS's expected value); `reply` its
    /// `reply_buffer` (CAS's new value on input), which receives the old value.
    Atomic {
        operand: u64,
        reply: u64,
    },
    AmSend {
        _header: Vec<u8>,
        _data: Vec<u8>,
    },
    Flush,
}

impl OpState {
    fn outcome(self) -> Outcome {
        match self.kind {
            OpKind::Get(words) => Outcome::Words(words),
            OpKind::Atomic { reply, .. } => Outcome::Old(reply),
            OpKind::Put { .. } | OpKind::AmSend { .. } | OpKind::Flush => Outcome::Done,
        }
    }
}

/// A rendezvous message whose data is still being fetched.
struct PendingRecv {
    shared: *const Shared,
    message: AmMessage,
}

/// The state callbacks reach through a raw pointer: freed only after `ucp_worker_destroy`,
/// so every callback UCX may still make finds it.
pub(crate) struct Shared {
    pub(crate) worker: sys::ucp_worker_h,
    done: Cell<VecDeque<(Box<OpState>, sys::ucs_status_t)>>,
    inbox: Cell<VecDeque<AmMessage>>,
    inbox_max: usize,
    receiving: Cell<usize>,
    dropped: Cell<u64>,
    /// Requests UCX holds (posted, not yet called back).
    outstanding: Cell<usize>,
    /// Progress calls so far: a [`ReplyEp`] is valid within the one it arrived in.
    pub(crate) epoch: Cell<u64>,
    /// One per registered message id: what UCX passes our receive callback (boxed, so the
    /// pointer UCX holds stays put as the list grows).
    #[allow(clippy::vec_box)]
    listeners: Cell<Vec<Box<Listener>>>,
}

/// What the receive callback of one message id gets: UCX does not pass the id itself.
struct Listener {
    shared: *const Shared,
    id: u16,
}

impl Shared {
    fn push_done(&self, op: Box<OpState>, code: sys::ucs_status_t) {
        let mut q = self.done.take();
        q.push_back((op, code));
        self.done.set(q);
    }

    fn push_message(&self, message: AmMessage) {
        let mut q = self.inbox.take();
        q.push_back(message);
        self.inbox.set(q);
    }

    fn inbox_len(&self) -> usize {
        let q = self.inbox.take();
        let n = q.len();
        self.inbox.set(q);
        n
    }
}

pub(crate) struct WorkerInner {
    pub(crate) handle: sys::ucp_worker_h,
    pub(crate) shared: *mut Shared,
    pub(crate) _context: Arc<ContextInner>,
}

impl WorkerInner {
    pub(crate) fn shared(&self) -> &Shared {
        // SAFETY: shared came from Box::into_raw in Worker::new and is freed only in this
        // value's drop; callbacks touch it through Cells only, on this thread.
        unsafe { &*self.shared }
    }

    /// One `ucp_worker_progress` call; a new epoch for reply handles.
    pub(crate) fn progress(&self) -> u32 {
        let shared = self.shared();
        shared.epoch.set(shared.epoch.get() + 1);
        // SAFETY: the worker is live and used from its owning thread only (Rc is !Send).
        unsafe { sys::ucp_worker_progress(self.handle) }
    }
}

impl Drop for WorkerInner {
    fn drop(&mut self) {
        // SAFETY: no endpoint is left (each holds an Rc of this worker); the worker is
        // destroyed once. Callbacks it makes while destroying still find `shared`.
        unsafe { sys::ucp_worker_destroy(self.handle) };
        // SAFETY: from Box::into_raw in Worker::new; UCX holds no pointer to it any more.
        drop(unsafe { Box::from_raw(self.shared) });
    }
}

/// A UCX worker and its event-loop queues. Not `Send`: it runs in UCX's single-threaded
/// mode and belongs to the thread that made it. Endpoints keep it alive.
pub struct Worker {
    pub(crate) inner: Rc<WorkerInner>,
}

impl Worker {
    pub fn new(context: &Context, config: &WorkerConfig) -> Result<Worker, UcxError> {
        // SAFETY: an all-zero ucp_worker_params_t selects no field; we select ours.
        let mut params: sys::ucp_worker_params_t = unsafe { std::mem::zeroed() };
        params.field_mask = sys::UCP_WORKER_PARAM_FIELD_THREAD_MODE as u64;
        params.thread_mode = sys::UCS_THREAD_MODE_SINGLE;
        let mut handle: sys::ucp_worker_h = std::ptr::null_mut();
        // SAFETY: the context is live (we hold its Arc); handle is a valid out-pointer.
        check("ucp_worker_create", unsafe {
            sys::ucp_worker_create(context.inner.handle, &params, &mut handle)
        })?;
        let shared = Box::into_raw(Box::new(Shared {
            worker: handle,
            done: Cell::new(VecDeque::new()),
            inbox: Cell::new(VecDeque::new()),
            inbox_max: config.am_inbox_messages_max,
            receiving: Cell::new(0),
            dropped: Cell::new(0),
            outstanding: Cell::new(0),
            epoch: Cell::new(0),
            listeners: Cell::new(Vec::new()),
        }));
        Ok(Worker {
            inner: Rc::new(WorkerInner {
                handle,
                shared,
                _context: context.inner.clone(),
            }),
        })
    }

    /// This worker's address, for peers to connect to.
    pub fn address(&self) -> Result<WorkerAddress, UcxError> {
        let mut addr: *mut sys::ucp_address_t = std::ptr::null_mut();
        let mut len: sys::size_t = 0;
        // SAFETY: the worker is live; addr and len are valid out-pointers.
        check("ucp_worker_get_address", unsafe {
            sys::ucp_worker_get_address(self.inner.handle, &mut addr, &mut len)
        })?;
        // SAFETY: UCX returned `len` readable bytes at `addr`, released right after copying.
        let bytes = unsafe { std::slice::from_raw_parts(addr as *const u8, len as usize) }.to_vec();
        // SAFETY: addr came from ucp_worker_get_address on this worker, released once.
        unsafe { sys::ucp_worker_release_address(self.inner.handle, addr) };
        Ok(WorkerAddress(bytes))
    }

    /// Lets active messages with `id` in: they queue for [`Worker::take_am`].
    pub fn receive_am(&self, id: u16) -> Result<(), UcxError> {
        // SAFETY: an all-zero ucp_am_handler_param_t selects no field; we select ours.
        let mut param: sys::ucp_am_handler_param_t = unsafe { std::mem::zeroed() };
        param.field_mask = (sys::UCP_AM_HANDLER_PARAM_FIELD_ID
            | sys::UCP_AM_HANDLER_PARAM_FIELD_FLAGS
            | sys::UCP_AM_HANDLER_PARAM_FIELD_CB
            | sys::UCP_AM_HANDLER_PARAM_FIELD_ARG) as u64;
        param.id = id as u32;
        param.flags = sys::UCP_AM_FLAG_WHOLE_MSG;
        let listener = Box::new(Listener {
            shared: self.inner.shared,
            id,
        });
        param.cb = Some(am_recv_callback);
        param.arg = &*listener as *const Listener as *mut c_void;
        // SAFETY: the worker is live; the listener is kept in `shared` (freed only after
        // ucp_worker_destroy), so `arg` stays valid as long as UCX may call back.
        let code = unsafe { sys::ucp_worker_set_am_recv_handler(self.inner.handle, &param) };
        let shared = self.inner.shared();
        let mut listeners = shared.listeners.take();
        listeners.push(listener);
        shared.listeners.set(listeners);
        check("ucp_worker_set_am_recv_handler", code)
    }

    /// One turn of UCX's progress engine: sends, receives, and calls back completions and
    /// messages into the queues. Returns the number of events UCX processed.
    pub fn progress(&self) -> u32 {
        self.inner.progress()
    }

    /// Hands every completion queued since the last call to `sink`; returns how many.
    pub fn poll_completions(&self, mut sink: impl FnMut(Completion)) -> usize {
        let shared = self.inner.shared();
        let mut n = 0;
        loop {
            // Take one at a time: `sink` may post ops, which push onto the same queue.
            let mut q = shared.done.take();
            let next = q.pop_front();
            shared.done.set(q);
            let Some((op, code)) = next else {
                return n;
            };
            n += 1;
            let token = op.token;
            let name = op.op;
            let result = if code == sys::UCS_OK {
                Ok(op.outcome())
            } else {
                Err(UcxError::status(name, code))
            };
            sink(Completion { token, result });
        }
    }

    /// The oldest received active message, if any.
    pub fn take_am(&self) -> Option<AmMessage> {
        let shared = self.inner.shared();
        let mut q = shared.inbox.take();
        let m = q.pop_front();
        shared.inbox.set(q);
        m
    }

    /// Active messages dropped because the inbox was full, or whose rendezvous data failed.
    pub fn am_dropped(&self) -> u64 {
        self.inner.shared().dropped.get()
    }

    /// Ops posted and not yet completed by UCX (completed ones wait in the queue).
    pub fn outstanding(&self) -> usize {
        self.inner.shared().outstanding.get()
    }

    /// Answers a message through the endpoint UCX handed with it (see [`ReplyEp`]).
    pub fn am_reply(
        &self,
        to: &ReplyEp,
        id: u16,
        header: Vec<u8>,
        data: Vec<u8>,
        token: u64,
    ) -> Result<(), UcxError> {
        let shared = self.inner.shared();
        if !std::ptr::eq(to.shared, shared) {
            return Err(UcxError::invalid(
                "am_reply",
                "the reply handle is another worker's",
            ));
        }
        if to.epoch != shared.epoch.get() {
            return Err(UcxError::invalid(
                "am_reply",
                "the reply handle is stale: this worker progressed since the message arrived",
            ));
        }
        send_am(
            &self.inner,
            to.ep,
            id,
            header,
            data,
            AmSendOptions::default(),
            token,
        )
    }

    /// Completes (with `token`) once every op posted before it, on every endpoint, is
    /// complete at its target (`ucp_worker_flush_nbx`).
    pub fn flush(&self, token: u64) -> Result<(), UcxError> {
        let op = Box::new(OpState {
            token,
            shared: self.inner.shared,
            kind: OpKind::Flush,
            _remote: None,
            op: "ucp_worker_flush_nbx",
        });
        let handle = self.inner.handle;
        post(&self.inner, op, 0, |param, _| {
            // SAFETY: the worker is live; param is valid for the call.
            unsafe { sys::ucp_worker_flush_nbx(handle, param) }
        })
    }

    /// Progresses until `done` holds, failing with `TimedOut` after `timeout`.
    pub fn progress_until(
        &self,
        op: &'static str,
        timeout: Duration,
        mut done: impl FnMut(&Worker) -> bool,
    ) -> Result<(), UcxError> {
        let start = Instant::now();
        loop {
            if done(self) {
                return Ok(());
            }
            if start.elapsed() > timeout {
                return Err(UcxError::TimedOut {
                    op,
                    waited_ms: timeout.as_millis() as u64,
                });
            }
            self.progress();
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Completed ops may hold remote keys, which hold endpoints, which hold this worker:
        // drop them so the worker is destroyed once its endpoints are.
        self.poll_completions(|_| {});
    }
}

/// Whether an endpoint asks UCX to report its peer's failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PeerFailure {
    /// `UCP_ERR_HANDLING_MODE_PEER`: a dead peer fails the endpoint's ops and sets
    /// [`Endpoint::failure`]. Not every transport supports it.
    Report,
    /// `UCP_ERR_HANDLING_MODE_NONE`: ops to a dead peer may never complete.
    Ignore,
}

/// How to send an active message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AmSendOptions {
    /// Hand the receiver a [`ReplyEp`] (`UCP_AM_SEND_FLAG_REPLY`).
    pub reply_ep: bool,
    pub protocol: AmProtocol,
}

/// Which UCX protocol carries an active message's data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AmProtocol {
    /// Eager below UCX's rendezvous threshold, rendezvous above.
    #[default]
    Auto,
    Eager,
    /// Even a short message (tests the receiver's fetch path).
    Rendezvous,
}

/// Sends an active message on `ep` (a user endpoint or a reply one).
pub(crate) fn send_am(
    worker: &WorkerInner,
    ep: sys::ucp_ep_h,
    id: u16,
    header: Vec<u8>,
    data: Vec<u8>,
    options: AmSendOptions,
    token: u64,
) -> Result<(), UcxError> {
    let (header_ptr, header_len) = (header.as_ptr(), header.len());
    let (data_ptr, data_len) = (data.as_ptr(), data.len());
    let op = Box::new(OpState {
        token,
        shared: worker.shared,
        kind: OpKind::AmSend {
            _header: header,
            _data: data,
        },
        _remote: None,
        op: "ucp_am_send_nbx",
    });
    let mut flags = match options.protocol {
        AmProtocol::Auto => 0,
        AmProtocol::Eager => sys::UCP_AM_SEND_FLAG_EAGER,
        AmProtocol::Rendezvous => sys::UCP_AM_SEND_FLAG_RNDV,
    };
    if options.reply_ep {
        flags |= sys::UCP_AM_SEND_FLAG_REPLY;
    }
    post(worker, op, flags, |param, _| {
        // SAFETY: ep is live; header and data are heap buffers owned by the op state, which
        // UCX holds until the callback (the vectors' buffers do not move with the Box).
        unsafe {
            sys::ucp_am_send_nbx(
                ep,
                id as u32,
                header_ptr as *const c_void,
                header_len as sys::size_t,
                data_ptr as *const c_void,
                data_len as sys::size_t,
                param,
            )
        }
    })
}

/// Posts one op: hands `op` to UCX as the request's user data, and takes it back at once if
/// UCX completed (or refused) the op in the call. A completed op is queued like any other.
pub(crate) fn post(
    worker: &WorkerInner,
    op: Box<OpState>,
    flags: u32,
    call: impl FnOnce(&sys::ucp_request_param_t, *mut OpState) -> sys::ucs_status_ptr_t,
) -> Result<(), UcxError> {
    let shared = worker.shared();
    let raw = Box::into_raw(op);
    // SAFETY: an all-zero ucp_request_param_t selects no field; we select ours.
    let mut param: sys::ucp_request_param_t = unsafe { std::mem::zeroed() };
    param.op_attr_mask = sys::UCP_OP_ATTR_FIELD_CALLBACK | sys::UCP_OP_ATTR_FIELD_USER_DATA;
    if flags != 0 {
        param.op_attr_mask |= sys::UCP_OP_ATTR_FIELD_FLAGS;
        param.flags = flags;
    }
    param.cb.send = Some(send_callback);
    param.user_data = raw as *mut c_void;
    // SAFETY (atomics): the operand and reply words live in the op state's Box, which UCX
    // owns until the callback; no one else touches them meanwhile.
    if let OpKind::Atomic { operand: _, reply } = unsafe { &mut (*raw).kind } {
        param.op_attr_mask |= sys::UCP_OP_ATTR_FIELD_DATATYPE | sys::UCP_OP_ATTR_FIELD_REPLY_BUFFER;
        param.datatype = DATATYPE_U64;
        param.reply_buffer = reply as *mut u64 as *mut c_void;
    }
    let ptr = call(&param, raw);
    if ptr.is_null() {
        // SAFETY: UCX completed the op in the call and never calls back for it: the state
        // is ours again.
        shared.push_done(unsafe { Box::from_raw(raw) }, sys::UCS_OK);
        Ok(())
    } else if ptr_is_err(ptr) {
        // SAFETY: UCX refused the op and never calls back for it.
        let op = unsafe { Box::from_raw(raw) };
        Err(UcxError::status(op.op, ptr as isize as sys::ucs_status_t))
    } else {
        shared.outstanding.set(shared.outstanding.get() + 1);
        Ok(())
    }
}

/// `ucp_dt_make_contig(8)`: one 64-bit word, what UCX's 64-bit atomics take.
const DATATYPE_U64: sys::ucp_datatype_t = (8 << sys::UCP_DATATYPE_SHIFT) as sys::ucp_datatype_t
    | sys::UCP_DATATYPE_CONTIG as sys::ucp_datatype_t;

/// `UCS_PTR_IS_ERR`: UCX returns error codes (−1..=−100) cast to pointers.
pub(crate) fn ptr_is_err(ptr: sys::ucs_status_ptr_t) -> bool {
    (ptr as usize) >= (sys::UCS_ERR_LAST as isize as usize)
}

/// Completion of every op we post.
unsafe extern "C" fn send_callback(
    request: *mut c_void,
    status: sys::ucs_status_t,
    user_data: *mut c_void,
) {
    // SAFETY: user_data is the op state `post` handed UCX, given back exactly once here.
    let op = unsafe { Box::from_raw(user_data as *mut OpState) };
    // SAFETY: op.shared outlives every request of its worker (freed after ucp_worker_destroy).
    let shared = unsafe { &*op.shared };
    shared
        .outstanding
        .set(shared.outstanding.get().saturating_sub(1));
    shared.push_done(op, status);
    // SAFETY: the request came from UCX for this op; freeing it in its callback is allowed.
    unsafe { sys::ucp_request_free(request) };
}

/// Queues an arriving active message: eager data is copied out at once; rendezvous data is
/// fetched into a buffer of its own and queued when that completes.
unsafe extern "C" fn am_recv_callback(
    arg: *mut c_void,
    header: *const c_void,
    header_length: sys::size_t,
    data: *mut c_void,
    length: sys::size_t,
    param: *const sys::ucp_am_recv_param_t,
) -> sys::ucs_status_t {
    // SAFETY: arg is a Listener registered by receive_am, and its shared the worker's
    // Shared, both alive until after ucp_worker_destroy; param is valid for the callback.
    let (listener, param) = unsafe { (&*(arg as *const Listener), &*param) };
    // SAFETY: as above.
    let shared = unsafe { &*listener.shared };
    let id = listener.id;
    let rendezvous = param.recv_attr & sys::UCP_AM_RECV_ATTR_FLAG_RNDV as u64 != 0;
    if shared.inbox_len() + shared.receiving.get() >= shared.inbox_max {
        shared.dropped.set(shared.dropped.get() + 1);
        // A rendezvous sender learns of the refusal; an eager message is simply gone.
        return if rendezvous {
            sys::UCS_ERR_NO_RESOURCE
        } else {
            sys::UCS_OK
        };
    }
    let header = if header_length == 0 {
        Vec::new()
    } else {
        // SAFETY: UCX passes header_length readable bytes at header for the callback.
        unsafe { std::slice::from_raw_parts(header as *const u8, header_length as usize) }.to_vec()
    };
    let reply = (param.recv_attr & sys::UCP_AM_RECV_ATTR_FIELD_REPLY_EP as u64 != 0
        && !param.reply_ep.is_null())
    .then(|| ReplyEp {
        ep: param.reply_ep,
        shared,
        epoch: shared.epoch.get(),
    });
    if !rendezvous {
        let data = if length == 0 {
            Vec::new()
        } else {
            // SAFETY: without the RNDV flag, data holds length readable bytes for the callback.
            unsafe { std::slice::from_raw_parts(data as *const u8, length as usize) }.to_vec()
        };
        shared.push_message(AmMessage {
            id,
            header,
            data,
            reply,
            rendezvous: false,
        });
        return sys::UCS_OK;
    }
    let mut pending = Box::new(PendingRecv {
        shared,
        message: AmMessage {
            id,
            header,
            data: vec![0u8; length as usize],
            reply,
            rendezvous: true,
        },
    });
    let buffer = pending.message.data.as_mut_ptr();
    let raw = Box::into_raw(pending);
    // SAFETY: an all-zero ucp_request_param_t selects no field; we select ours.
    let mut rp: sys::ucp_request_param_t = unsafe { std::mem::zeroed() };
    rp.op_attr_mask = sys::UCP_OP_ATTR_FIELD_CALLBACK | sys::UCP_OP_ATTR_FIELD_USER_DATA;
    rp.cb.recv_am = Some(am_data_callback);
    rp.user_data = raw as *mut c_void;
    // SAFETY: data is the rendezvous descriptor of this callback; buffer holds length bytes
    // and lives in the pending state UCX owns until am_data_callback. Starting the fetch
    // inside the callback is allowed; UCX owns the descriptor from here on.
    let ptr = unsafe {
        sys::ucp_am_recv_data_nbx(shared.worker, data, buffer as *mut c_void, length, &rp)
    };
    if ptr.is_null() {
        // SAFETY: completed in the call; UCX will not call back, the state is ours again.
        let pending = unsafe { Box::from_raw(raw) };
        shared.push_message(pending.message);
    } else if ptr_is_err(ptr) {
        // SAFETY: refused; UCX will not call back.
        drop(unsafe { Box::from_raw(raw) });
        shared.dropped.set(shared.dropped.get() + 1);
    } else {
        shared.receiving.set(shared.receiving.get() + 1);
    }
    // The descriptor is UCX's now (the fetch started); INPROGRESS keeps it until then.
    sys::UCS_INPROGRESS
}

/// The rendezvous data of a message arrived (or failed).
unsafe extern "C" fn am_data_callback(
    request: *mut c_void,
    status: sys::ucs_status_t,
    _length: sys::size_t,
    user_data: *mut c_void,
) {
    // SAFETY: user_data is the PendingRecv handed to ucp_am_recv_data_nbx, given back once.
    let mut pending = unsafe { Box::from_raw(user_data as *mut PendingRecv) };
    // SAFETY: the worker's Shared outlives its requests.
    let shared = unsafe { &*pending.shared };
    shared
        .receiving
        .set(shared.receiving.get().saturating_sub(1));
    if status == sys::UCS_OK {
        if let Some(reply) = pending.message.reply.as_mut() {
            reply.epoch = shared.epoch.get();
        }
        shared.push_message(pending.message);
    } else {
        shared.dropped.set(shared.dropped.get() + 1);
    }
    // SAFETY: the request came from ucp_am_recv_data_nbx; freed once, in its callback.
    unsafe { sys::ucp_request_free(request) };
}
