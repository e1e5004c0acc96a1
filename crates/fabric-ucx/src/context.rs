//! `Context`: one UCX application context (`ucp_init`) with the features Atoll needs (RMA,
//! 64-bit atomics, active messages), its transports chosen per context through
//! `ucp_config_modify`, so tests in one process pick theirs without touching the
//! environment (which other threads may be reading).

use crate::error::{check, UcxError};
use crate::sys;
use std::ffi::CString;
use std::sync::Arc;

/// The transports a context may use (UCX's `TLS` setting).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transports {
    /// `tcp`: sockets, also between machines. UCX emulates RMA and atomics over active
    /// messages the target's worker serves, so they complete only as the target progresses.
    Tcp,
    /// `sm,self`: shared memory between processes of one machine (posix/sysv segments, CMA
    /// for large copies), and loopback to the same worker.
    SharedMemory,
    /// Whatever `UCX_TLS` in the environment says (UCX's default when unset).
    Environment,
}

impl Transports {
    /// The value given to UCX's `TLS` setting, `None` to leave it to the environment.
    pub fn tls(self) -> Option<&'static str> {
        match self {
            Transports::Tcp => Some("tcp"),
            Transports::SharedMemory => Some("sm,self"),
            Transports::Environment => None,
        }
    }

    /// Whether UCX 1.13 can report a failed peer over these transports, so endpoints are
    /// made with `UCP_ERR_HANDLING_MODE_PEER`. Its shared-memory transports cannot ("no peer
    /// failure handler": UCX refuses such an endpoint), so over them a dead peer shows only
    /// as ops that never complete, which the caller's deadline must catch.
    pub fn reports_peer_failure(self) -> bool {
        !matches!(self, Transports::SharedMemory)
    }

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            Transports::Tcp => "tcp",
            Transports::SharedMemory => "shm",
            Transports::Environment => "env",
        }
    }
}

/// How to make a [`Context`].
#[derive(Clone, Debug)]
pub struct ContextConfig {
    pub transports: Transports,
    /// Further UCX settings, names without the `UCX_` prefix (`("RNDV_THRESH", "8k")`),
    /// applied after the environment and before `transports`.
    pub settings: Vec<(String, String)>,
}

impl ContextConfig {
    pub fn new(transports: Transports) -> Self {
        ContextConfig {
            transports,
            settings: Vec::new(),
        }
    }
}

/// A UCX context. Cheap to clone; workers and memory regions keep it alive. Shared between
/// threads (`mt_workers_shared`), so each OS thread can own a worker of one context and every
/// worker reaches the regions the context registered.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

pub(crate) struct ContextInner {
    pub(crate) handle: sys::ucp_context_h,
    pub(crate) transports: Transports,
}

// SAFETY: the context is created with mt_workers_shared = 1, which makes UCX guard its
// context-level state (workers created, memory mapped and unmapped from several threads);
// the handle itself is never mutated by us.
unsafe impl Send for ContextInner {}
// SAFETY: as for Send: every context-level call is thread-safe under mt_workers_shared.
unsafe impl Sync for ContextInner {}

impl Drop for ContextInner {
    fn drop(&mut self) {
        // SAFETY: the handle came from ucp_init_version; workers and memory regions hold an
        // Arc of this context, so none is left when it is cleaned up.
        unsafe { sys::ucp_cleanup(self.handle) };
    }
}

/// Releases a configuration read by `ucp_config_read` when dropped.
struct ConfigGuard(*mut sys::ucp_config_t);

impl Drop for ConfigGuard {
    fn drop(&mut self) {
        // SAFETY: the pointer came from a successful ucp_config_read and is released once.
        unsafe { sys::ucp_config_release(self.0) };
    }
}

fn c_string(op: &'static str, s: &str) -> Result<CString, UcxError> {
    CString::new(s).map_err(|_| UcxError::invalid(op, format!("{s:?} holds a NUL byte")))
}

impl Context {
    /// Reads UCX's configuration from the environment, applies `config`'s settings and
    /// transports, and initialises a context with RMA, AMO64 and AM.
    pub fn new(config: &ContextConfig) -> Result<Context, UcxError> {
        if !crate::BUILT_WITH_UCX {
            return Err(UcxError::NotBuilt);
        }
        let mut raw: *mut sys::ucp_config_t = std::ptr::null_mut();
        // SAFETY: null prefix and file mean "UCX_ from the environment, no file"; raw is a
        // valid out-pointer.
        check("ucp_config_read", unsafe {
            sys::ucp_config_read(std::ptr::null(), std::ptr::null(), &mut raw)
        })?;
        let guard = ConfigGuard(raw);
        let tls = config
            .transports
            .tls()
            .map(|t| ("TLS".to_string(), t.to_string()));
        for (name, value) in config.settings.iter().cloned().chain(tls) {
            let name_c = c_string("ucp_config_modify", &name)?;
            let value_c = c_string("ucp_config_modify", &value)?;
            // SAFETY: guard.0 is a live configuration; both strings are NUL-terminated and
            // outlive the call (UCX copies them).
            let code =
                unsafe { sys::ucp_config_modify(guard.0, name_c.as_ptr(), value_c.as_ptr()) };
            if code != sys::UCS_OK {
                return Err(UcxError::Invalid {
                    op: "ucp_config_modify",
                    reason: format!(
                        "UCX refused {name}={value}: {}",
                        crate::error::status_string(code)
                    ),
                });
            }
        }
        // SAFETY: an all-zero ucp_params_t is valid (no fields selected); we select ours.
        let mut params: sys::ucp_params_t = unsafe { std::mem::zeroed() };
        params.field_mask =
            (sys::UCP_PARAM_FIELD_FEATURES | sys::UCP_PARAM_FIELD_MT_WORKERS_SHARED) as u64;
        params.features =
            (sys::UCP_FEATURE_RMA | sys::UCP_FEATURE_AMO64 | sys::UCP_FEATURE_AM) as u64;
        params.mt_workers_shared = 1;
        let mut handle: sys::ucp_context_h = std::ptr::null_mut();
        // SAFETY: params and the configuration are valid for the call; handle is a valid
        // out-pointer. ucp_init is a static inline wrapper of exactly this call.
        check("ucp_init", unsafe {
            sys::ucp_init_version(
                sys::UCP_API_MAJOR,
                sys::UCP_API_MINOR,
                &params,
                guard.0,
                &mut handle,
            )
        })?;
        Ok(Context {
            inner: Arc::new(ContextInner {
                handle,
                transports: config.transports,
            }),
        })
    }

    pub fn transports(&self) -> Transports {
        self.inner.transports
    }

    /// The version of the UCX library this process runs (`ucp_get_version_string`).
    pub fn ucx_version() -> Result<String, UcxError> {
        if !crate::BUILT_WITH_UCX {
            return Err(UcxError::NotBuilt);
        }
        // SAFETY: returns a pointer to a static NUL-terminated string.
        let text = unsafe { std::ffi::CStr::from_ptr(sys::ucp_get_version_string()) };
        Ok(text.to_string_lossy().into_owned())
    }
}
