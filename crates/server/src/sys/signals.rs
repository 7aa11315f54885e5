//! SIGINT and SIGTERM stop the server cleanly: the handler sets a flag every worker checks at
//! least once a second. SIGHUP asks for the TLS certificates to be loaded again (memcached's
//! reload signal), through another flag.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set by SIGINT/SIGTERM; the loop checks it every turn (at least once a second).
pub(crate) static STOP: AtomicBool = AtomicBool::new(false);

/// Set by SIGHUP; the first worker takes it and reloads the certificates.
pub(crate) static RELOAD: AtomicBool = AtomicBool::new(false);

extern "C" fn request_stop(signal: libc::c_int) {
    if signal == libc::SIGHUP {
        RELOAD.store(true, Ordering::Relaxed);
    } else {
        STOP.store(true, Ordering::Relaxed);
    }
}

/// Makes SIGINT and SIGTERM stop the server cleanly instead of killing it mid-write, and
/// SIGHUP ask for a reload instead of killing it.
pub(crate) fn install_signal_handlers() -> std::io::Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe; the
        // sigaction struct is zero-initialised plain data with the handler and an empty mask.
        let installed = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = request_stop as extern "C" fn(libc::c_int) as libc::sighandler_t;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(signal, &action, std::ptr::null_mut()) == 0
        };
        if !installed {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}
