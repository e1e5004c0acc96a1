//! Typed errors of the UCX layer: every UCX status becomes a [`UcxError`] naming the call
//! that returned it, and bad input (a malformed descriptor, an access out of a region's
//! bounds) is refused before UCX sees it.

use crate::sys;

/// What went wrong, and in which call.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum UcxError {
    /// The crate was compiled without UCX (pkg-config found no `ucx`, or `ATOLL_UCX=off`).
    #[error(
        "atoll-fabric-ucx was built without UCX: apt-get install libucx-dev (UCX 1.13 or \
         newer, pkg-config name `ucx`) and rebuild"
    )]
    NotBuilt,
    /// A UCX call returned an error status, or an operation completed with one.
    #[error("{op}: {status} (ucs_status_t {code})")]
    Status {
        op: &'static str,
        /// `ucs_status_string` of the code.
        status: String,
        code: i8,
    },
    /// The endpoint's error handler reported its peer failed; ops on it are refused.
    #[error("{op}: the endpoint's peer failed: {status}")]
    EndpointFailed { op: &'static str, status: String },
    /// A bounded wait ran out.
    #[error("{op}: nothing completed within {waited_ms} ms")]
    TimedOut { op: &'static str, waited_ms: u64 },
    /// An access outside the remote region its descriptor announced.
    #[error(
        "{op}: {len_words} words at word {offset_words} are outside the remote region's \
         {region_words} words"
    )]
    OutOfBounds {
        op: &'static str,
        offset_words: u64,
        len_words: u64,
        region_words: u64,
    },
    /// Input refused before UCX saw it (a malformed descriptor or address, an empty region, a
    /// setting with a NUL byte, a reply handle from another worker or an earlier progress call).
    #[error("{op}: {reason}")]
    Invalid { op: &'static str, reason: String },
}

impl UcxError {
    /// The error of `op` for a UCX status code.
    pub(crate) fn status(op: &'static str, code: sys::ucs_status_t) -> UcxError {
        UcxError::Status {
            op,
            status: status_string(code),
            code,
        }
    }

    pub(crate) fn invalid(op: &'static str, reason: impl Into<String>) -> UcxError {
        UcxError::Invalid {
            op,
            reason: reason.into(),
        }
    }
}

/// UCX's name for a status code.
pub(crate) fn status_string(code: sys::ucs_status_t) -> String {
    // SAFETY: ucs_status_string returns a pointer to a static NUL-terminated string for
    // every code (unknown ones included), never null.
    let text = unsafe { std::ffi::CStr::from_ptr(sys::ucs_status_string(code)) };
    text.to_string_lossy().into_owned()
}

/// `Ok` for `UCS_OK`, the typed error of `op` otherwise.
pub(crate) fn check(op: &'static str, code: sys::ucs_status_t) -> Result<(), UcxError> {
    if code == sys::UCS_OK {
        Ok(())
    } else {
        Err(UcxError::status(op, code))
    }
}
