//! Ctrl-C (and SIGTERM): the first one asks the running workload to end its current interval and
//! finish normally (summary, run.json, CSV; a matrix stops after the current run and writes its
//! report from what ran); a second one exits at once with status 130.
//!
//! Invariant: the handler only sets a flag (and prints one line); all the work happens on the
//! driver's own threads, which poll the flag at least every 20 ms.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// The process-wide flag, installing the handler on first use. If the handler cannot be
/// installed (another one already is), the flag still exists and Ctrl-C keeps its default
/// behaviour; the reason is printed.
pub fn flag() -> Arc<AtomicBool> {
    FLAG.get_or_init(|| {
        let f = Arc::new(AtomicBool::new(false));
        let h = f.clone();
        if let Err(e) = ctrlc::set_handler(move || {
            if h.swap(true, Ordering::SeqCst) {
                eprintln!("\nsecond interrupt: exiting now");
                std::process::exit(130);
            }
            eprintln!(
                "\ninterrupt: ending the current interval, then the summary and the run files \
                 (interrupt again to exit at once)"
            );
        }) {
            eprintln!("note: cannot catch Ctrl-C ({e}); it will end the process at once");
        }
        f
    })
    .clone()
}

/// Whether an interrupt was asked for (false if [`flag`] was never called).
pub fn requested() -> bool {
    FLAG.get().is_some_and(|f| f.load(Ordering::Relaxed))
}
