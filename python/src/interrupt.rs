//! Ctrl-C while a call blocks with the GIL released.
//!
//! CPython runs signal handlers only on the main thread, between bytecodes; a thread blocked in
//! Rust never gets there. The library asks [`Config::interrupt`](rdma_container::Config) once
//! per wait slice (at least every 100 ms); on the main thread our check re-takes the GIL for a
//! moment and runs the pending handlers (`PyErr_CheckSignals`). When one raises, the error is
//! kept here, the check says "stop", the call returns `Interrupted`, and the caller aborts the
//! session and raises the kept error. Other threads never take the GIL here: signals are not
//! theirs to handle.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use rdma_container::InterruptCheck;

/// The OS thread id of Python's main thread (0 until the module is imported).
static MAIN_THREAD: AtomicI64 = AtomicI64::new(0);
/// Signals are looked at no more often than this (a check takes the GIL).
const MIN_CHECK_INTERVAL: Duration = Duration::from_millis(10);

thread_local! {
    /// Whether this thread is Python's main thread (computed once per thread).
    static IS_MAIN: Cell<Option<bool>> = const { Cell::new(None) };
    /// When this thread last ran the signal handlers.
    static LAST_CHECK: Cell<Option<Instant>> = const { Cell::new(None) };
    /// The exception a signal handler raised during a wait, until the caller raises it.
    static PENDING: RefCell<Option<PyErr>> = const { RefCell::new(None) };
}

/// Notes which thread is Python's main thread (`threading.main_thread().native_id`).
pub(crate) fn remember_main_thread(py: Python<'_>) -> PyResult<()> {
    let id: i64 = py
        .import("threading")?
        .call_method0("main_thread")?
        .getattr("native_id")?
        .extract()?;
    MAIN_THREAD.store(id, Ordering::Relaxed);
    Ok(())
}

fn on_main_thread() -> bool {
    IS_MAIN.with(|cached| {
        *cached.get().get_or_insert_with(|| {
            // SAFETY: gettid has no preconditions and cannot fail.
            let tid = i64::from(unsafe { libc::gettid() });
            tid == MAIN_THREAD.load(Ordering::Relaxed)
        })
    })
}

/// Runs Python's pending signal handlers; true (stop waiting) when one raised.
fn handlers_raised() -> bool {
    if !on_main_thread() {
        return false;
    }
    let now = Instant::now();
    let due = LAST_CHECK.with(|last| {
        let due = last
            .get()
            .is_none_or(|t| now.duration_since(t) >= MIN_CHECK_INTERVAL);
        if due {
            last.set(Some(now));
        }
        due
    });
    if !due {
        return false;
    }
    Python::attach(|py| match py.check_signals() {
        Ok(()) => false,
        Err(e) => {
            PENDING.with(|p| *p.borrow_mut() = Some(e));
            true
        }
    })
}

/// The check every session's configuration carries.
pub(crate) fn check() -> InterruptCheck {
    InterruptCheck::new(handlers_raised)
}

/// The exception a signal handler raised during the last interrupted wait on this thread.
pub(crate) fn take_pending() -> Option<PyErr> {
    PENDING.with(|p| p.borrow_mut().take())
}
