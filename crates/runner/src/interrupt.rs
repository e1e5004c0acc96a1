//! Ctrl-C: the first SIGINT asks the running benchmark to stop (workers end their current
//! transaction and the run reports what it measured, marked partial); a second exits at
//! once with `EXIT_INTERRUPTED`.

use std::sync::atomic::{AtomicBool, Ordering};

/// Exit code of an interrupted command: 128 + SIGINT, the shell's convention.
pub const EXIT_INTERRUPTED: u8 = 130;

/// Set by the first SIGINT (or `request`); never cleared: one interrupt ends the command.
static STOP: AtomicBool = AtomicBool::new(false);

/// Whether a stop was asked for. Workers read it once per transaction.
pub fn requested() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// Asks every run of this process to stop, as the first Ctrl-C does.
pub fn request() {
    STOP.store(true, Ordering::Relaxed);
}

/// What the first Ctrl-C prints (from the handler: only `write` is allowed there).
const FIRST_MESSAGE: &[u8] =
    b"\ninterrupted: ending the run early with a partial report (Ctrl-C again exits at once)\n";

extern "C" fn on_sigint(_: libc::c_int) {
    // Only async-signal-safe calls here: an atomic swap, write and _exit.
    if STOP.swap(true, Ordering::SeqCst) {
        // SAFETY: _exit is async-signal-safe and ends the process without unwinding.
        unsafe { libc::_exit(EXIT_INTERRUPTED as libc::c_int) }
    }
    // SAFETY: write(2) is async-signal-safe; the buffer is static. A failed write is moot.
    unsafe {
        libc::write(
            libc::STDERR_FILENO,
            FIRST_MESSAGE.as_ptr().cast(),
            FIRST_MESSAGE.len(),
        );
    }
}

/// The kernel refused the SIGINT handler (the run still works; Ctrl-C then kills it as usual).
#[derive(Debug, thiserror::Error)]
#[error("cannot install the Ctrl-C handler: {0}")]
pub struct InstallError(pub std::io::Error);

/// Installs the SIGINT handler, or says why the kernel refused it.
pub fn install() -> Result<(), InstallError> {
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value; the handler only
    // makes async-signal-safe calls; SA_RESTART keeps interrupted system calls going.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        if libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut()) != 0 {
            return Err(InstallError(std::io::Error::last_os_error()));
        }
    }
    Ok(())
}
