//! Control surface of the DOCA simulator (only with `found = sim`): leak accounting,
//! fault injection and device list, the same knobs as its environment variables
//! (`DOCA_SIM_FAIL`, `DOCA_SIM_DROP_AFTER`, `DOCA_SIM_DEVICES`, `DOCA_SIM_RNR_DELAY_MS`,
//! `DOCA_SIM_START`, `DOCA_SIM_MAX_MSG_SIZE`, `DOCA_SIM_STOP`, `DOCA_SIM_ARM`, `DOCA_SIM_BATCH`,
//! `DOCA_SIM_MAX_SEND_QUEUE`, `DOCA_SIM_MAX_RECV_QUEUE`;
//! see the crate README). Settings are process-wide.

use crate::bindings::{doca_error, doca_error_t};
use std::ffi::CString;
use std::os::raw::{c_char, c_long, c_uint};

/// The raw C functions (declared in `sim/include/doca_sim.h`).
pub mod ffi {
    use super::*;

    extern "C" {
        /// Objects not destroyed yet (lists, devices, engines, contexts, mmaps,
        /// inventories, bufs taken, tasks allocated).
        pub fn doca_sim_live_objects() -> usize;
        /// One-line JSON report into `buf` (NUL-terminated); returns the full length.
        pub fn doca_sim_report(buf: *mut c_char, len: usize) -> usize;
        /// Replace the fault list (`DOCA_SIM_FAIL` syntax; NULL clears it).
        pub fn doca_sim_set_faults(spec: *const c_char) -> doca_error_t;
        /// Drop connections after `n` completed messages; `n < 0` disables.
        pub fn doca_sim_set_drop_after(n: c_long);
        /// Replace the device list (`DOCA_SIM_DEVICES` syntax).
        pub fn doca_sim_set_devices(spec: *const c_char) -> doca_error_t;
        /// Back-off between receiver-not-ready retries, in milliseconds.
        pub fn doca_sim_set_rnr_delay_ms(ms: c_uint);
        /// `doca_ctx_start` asynchronous (nonzero) or synchronous (0).
        pub fn doca_sim_set_start_async(async_: std::os::raw::c_int);
        /// What `doca_rdma_cap_get_max_message_size` reports.
        pub fn doca_sim_set_max_msg_size(max: u32);
        /// `doca_ctx_stop` with tasks allocated: refused (nonzero) or accepted (0).
        pub fn doca_sim_set_stop_refuse(refuse: std::os::raw::c_int);
        /// Arming with work pending: raises at once (0, level) or not (nonzero, edge).
        pub fn doca_sim_set_arm_edge(edge: std::os::raw::c_int);
        /// Completions one CQ poll moves into the engine (0 or 1: off).
        pub fn doca_sim_set_batch(n: u32);
        /// What the queue size capabilities report (0: the default).
        pub fn doca_sim_set_queue_caps(max_send: u32, max_recv: u32);
        /// A link flap under every connected connection of this process; returns how many.
        pub fn doca_sim_flap_links() -> usize;
        /// Restore the settings the environment gave at start-up.
        pub fn doca_sim_reset_config();
    }
}

/// Number of simulator objects that have not been destroyed (0 after a clean teardown).
pub fn live_objects() -> usize {
    // SAFETY: takes no arguments; the simulator locks its own state.
    unsafe { ffi::doca_sim_live_objects() }
}

/// The simulator's report, e.g. `{"pid":1,"live":0,"objects":{"pe":0,...}}`.
pub fn report() -> String {
    let mut buf = vec![0u8; 1024];
    // SAFETY: buf is writable for buf.len() bytes; the simulator NUL-terminates within it.
    let needed = unsafe { ffi::doca_sim_report(buf.as_mut_ptr().cast(), buf.len()) };
    buf.truncate(needed.min(buf.len() - 1));
    String::from_utf8_lossy(&buf).into_owned()
}

fn cstring(s: &str) -> Result<CString, doca_error_t> {
    CString::new(s).map_err(|_| doca_error::DOCA_ERROR_INVALID_VALUE)
}

fn check(rc: doca_error_t) -> Result<(), doca_error_t> {
    if rc == doca_error::DOCA_SUCCESS {
        Ok(())
    } else {
        Err(rc)
    }
}

/// Replace the fault list: `"function:N[+]:CODE,..."` fails the Nth call (or the Nth and
/// every later one with `+`) of `function` with `CODE` (`DOCA_ERROR_X`, `X`, or a number).
/// Besides API functions, `doca_rdma_task_send_completion` and
/// `doca_rdma_task_receive_completion` fail the Nth successful completion of that task type.
/// An empty spec clears the list.
pub fn set_faults(spec: &str) -> Result<(), doca_error_t> {
    let spec = cstring(spec)?;
    // SAFETY: spec is a valid NUL-terminated string for the duration of the call.
    check(unsafe { ffi::doca_sim_set_faults(spec.as_ptr()) })
}

/// Drop every connection after `n` completed messages (both sides then fail their tasks
/// with `DOCA_ERROR_CONNECTION_RESET`); `None` disables.
pub fn set_drop_after(n: Option<u64>) {
    let n = n.map_or(-1, |n| c_long::try_from(n).unwrap_or(c_long::MAX));
    // SAFETY: plain value argument.
    unsafe { ffi::doca_sim_set_drop_after(n) }
}

/// Replace the device list: `"ibdev[:iface[:ipv4[:ib|eth]]],..."`.
pub fn set_devices(spec: &str) -> Result<(), doca_error_t> {
    let spec = cstring(spec)?;
    // SAFETY: spec is a valid NUL-terminated string for the duration of the call.
    check(unsafe { ffi::doca_sim_set_devices(spec.as_ptr()) })
}

/// Set the back-off between receiver-not-ready retries.
pub fn set_rnr_delay_ms(ms: u32) {
    // SAFETY: plain value argument.
    unsafe { ffi::doca_sim_set_rnr_delay_ms(ms) }
}

/// Whether `doca_ctx_start` is asynchronous (answers `DOCA_ERROR_IN_PROGRESS`, the context
/// reaches RUNNING during `doca_pe_progress` once connected) or synchronous (RUNNING at once).
pub fn set_start_async(async_: bool) {
    // SAFETY: plain value argument.
    unsafe { ffi::doca_sim_set_start_async(async_.into()) }
}

/// What `doca_rdma_cap_get_max_message_size` reports from now on.
pub fn set_max_msg_size(max: u32) {
    // SAFETY: plain value argument.
    unsafe { ffi::doca_sim_set_max_msg_size(max) }
}

/// Restore every setting to what the environment said when the simulator started.
pub fn reset_config() {
    // SAFETY: takes no arguments.
    unsafe { ffi::doca_sim_reset_config() }
}

/// Whether `doca_ctx_stop` refuses (`IN_USE`) while tasks are allocated (`DOCA_SIM_STOP=refuse`)
/// or accepts it, STOPPING until they are freed, as the SDK does (`accept`, the default).
pub fn set_stop_refuse(refuse: bool) {
    // SAFETY: plain value argument.
    unsafe { ffi::doca_sim_set_stop_refuse(refuse.into()) }
}

/// Whether arming the notification raises nothing for completions already pending
/// (`DOCA_SIM_ARM=edge`) or raises at once (`level`, the default).
pub fn set_arm_edge(edge: bool) {
    // SAFETY: plain value argument.
    unsafe { ffi::doca_sim_set_arm_edge(edge.into()) }
}

/// Batch mode (`DOCA_SIM_BATCH=n`): one CQ poll moves up to `n` completions into the engine,
/// where they wait for their callbacks without raising the notification; 0 or 1: off.
pub fn set_batch(n: u32) {
    // SAFETY: plain value argument.
    unsafe { ffi::doca_sim_set_batch(n) }
}

/// What `doca_rdma_cap_get_max_send_queue_size` and `..._recv_queue_size` report from now on
/// (0: the default, 32768).
pub fn set_queue_caps(max_send: u32, max_recv: u32) {
    // SAFETY: plain value arguments.
    unsafe { ffi::doca_sim_set_queue_caps(max_send, max_recv) }
}

/// A link flap now, under every connected connection of this process, long enough for RC's
/// retries to give up: what was on the wire arrives, then each connection is dead. A send in
/// flight or submitted later fails with `DOCA_ERROR_IO_FAILED` and puts its connection in
/// error (flushing its posted receives); a connection with nothing to send notices nothing, as
/// an RC responder does not, and its posted receives never complete. Only a new connection
/// (`doca_ctx_stop`, `doca_ctx_start`, export and connect again) carries data. Returns the
/// number of connections flapped.
pub fn flap_links() -> usize {
    // SAFETY: takes no arguments; the simulator locks its own state.
    unsafe { ffi::doca_sim_flap_links() }
}
