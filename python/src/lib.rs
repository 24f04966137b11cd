//! `rdma_container._native`: the Python classes over the rdma-container library.
//!
//! Nothing here moves bytes or keeps protocol state: every call goes to the Rust library with
//! the GIL released. What this layer adds is Python's side of memory safety: a received
//! [`Message`] exports the receive slot through the buffer protocol (no copy) and counts its
//! exports, and the next `recv()` refuses to hand the slot back to the NIC while any export is
//! alive (`BufferError`, as `bytearray` refuses to resize). Ctrl-C: the library asks
//! [`interrupt_check`] once per wait slice (100 ms), which runs Python's signal handlers on the
//! main thread; when one raises, the blocking call returns, the session is aborted (the peer
//! sees it) and the handler's exception (`KeyboardInterrupt`) is raised.

mod errors;
mod interrupt;
mod message;
mod options;

use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyBufferError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::MutexExt;
use pyo3::types::{PyBytes, PyDict, PyTuple};
use rdma_container as rdma;

use crate::errors::{closed_error, raise};
use crate::message::{Lease, Lent, Message, SlotView};

/// A session's lock: poisoned only if a panic crossed it, which PyO3 turns into an exception.
fn lock<'a, T>(py: Python<'_>, m: &'a Mutex<T>) -> PyResult<std::sync::MutexGuard<'a, T>> {
    m.lock_py_attached(py)
        .map_err(|_| PyRuntimeError::new_err("an earlier call on this object panicked"))
}

/// `"host:port"` or `(host, port)`, resolved to its first IPv4 address (RoCE v2 is IPv4 here).
fn socket_addr(addr: &Bound<'_, PyAny>) -> PyResult<SocketAddr> {
    let resolved: Vec<SocketAddr> = if let Ok(text) = addr.extract::<String>() {
        text.to_socket_addrs()
            .map_err(|e| PyValueError::new_err(format!("bad address {text:?}: {e}")))?
            .collect()
    } else if let Ok((host, port)) = addr.extract::<(String, u16)>() {
        (host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| PyValueError::new_err(format!("bad address ({host:?}, {port}): {e}")))?
            .collect()
    } else {
        return Err(PyTypeError::new_err(
            "an address is \"host:port\" or a (host, port) tuple",
        ));
    };
    resolved
        .iter()
        .find(|a| a.is_ipv4())
        .copied()
        .ok_or_else(|| PyValueError::new_err("the address has no IPv4 address"))
}

/// A C-contiguous buffer of any item type, read as bytes: pointer and length (the buffer
/// stays exported while the returned guard lives).
fn contiguous_bytes(obj: &Bound<'_, PyAny>, writable: bool) -> PyResult<(PyUntypedBuffer, usize)> {
    let buf = PyUntypedBuffer::get(obj)?;
    if !buf.is_c_contiguous() {
        return Err(PyBufferError::new_err(
            "the buffer is not C-contiguous (use numpy.ascontiguousarray or bytes())",
        ));
    }
    if writable && buf.readonly() {
        return Err(PyBufferError::new_err("the buffer is read-only"));
    }
    let len = buf.len_bytes();
    Ok((buf, len))
}

/// What was chosen and negotiated for a session (read-only).
#[pyclass(frozen, get_all, module = "rdma_container")]
struct SessionInfo {
    /// `"tcp"`, `"verbs"` or `"doca"`.
    transport: String,
    /// Our source address toward the peer.
    source: String,
    /// The peer's address.
    peer: String,
    /// The interface that owns the source address, when known.
    interface: Option<String>,
    /// The window: the receiver's slot count.
    credits: u16,
    /// The queue pairs (tcp: data connections) the messages are striped over.
    qps: u8,
    /// The largest message this session carries (the smaller of both ends' limits).
    max_message_size: u32,
    /// The data path's MTU (RDMA transports).
    mtu: Option<u32>,
    /// The RDMA device, when an RDMA transport runs.
    device: Option<String>,
    /// Its port.
    ib_port: Option<u32>,
    /// Its GID index.
    gid_index: Option<u32>,
    /// The GID.
    gid: Option<String>,
    /// One line saying all of it (as the command line prints it).
    description: String,
}

#[pymethods]
impl SessionInfo {
    fn __repr__(&self) -> String {
        format!("SessionInfo({})", self.description)
    }
}

impl SessionInfo {
    fn new(info: &rdma::SessionInfo) -> Self {
        let device = info.device.as_ref();
        Self {
            transport: info.transport.name().to_owned(),
            source: info.path.source.to_string(),
            peer: info.path.peer.to_string(),
            interface: info.path.interface.clone(),
            credits: info.credits(),
            qps: info.qps(),
            max_message_size: info.max_msg_size(),
            mtu: info.mtu(),
            device: device.map(|d| d.device.clone()),
            ib_port: device.map(|d| d.port),
            gid_index: device.map(|d| d.gid_index),
            gid: device.map(|d| d.gid_string()),
            description: info.describe(),
        }
    }
}

/// The sending end of a session. `send` copies each message into a registered staging slot,
/// so the buffer may be reused as soon as it returns; `finish()` ends the stream. Used as a
/// context manager it finishes on a clean exit and aborts on an exception.
#[pyclass(frozen, module = "rdma_container")]
struct RdmaSink {
    inner: Mutex<Option<rdma::RdmaSink>>,
    info: Py<SessionInfo>,
    /// Readable after `finish` too.
    resumes: rdma::ResumeCounters,
    paths: rdma::PathCounters,
}

impl RdmaSink {
    fn wrap(py: Python<'_>, sink: rdma::RdmaSink) -> PyResult<Self> {
        let info = Py::new(py, SessionInfo::new(sink.info()))?;
        Ok(Self {
            resumes: sink.resume_counters(),
            paths: sink.path_counters(),
            inner: Mutex::new(Some(sink)),
            info,
        })
    }

    /// Sends `data` (any C-contiguous buffer) with `send`, the blocking or the non-blocking
    /// call, the GIL released.
    fn send_buffer(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        send: fn(&mut rdma::RdmaSink, &[u8]) -> rdma::Result<()>,
    ) -> PyResult<()> {
        let (buf, len) = contiguous_bytes(data, false)?;
        let at = buf.buf_ptr() as usize;
        let result = self.with_sink(py, move |sink| {
            // SAFETY: `buf` keeps the object's buffer exported (so it can be neither freed nor
            // resized) until after this call; it is C-contiguous and `len` bytes long.
            let bytes = unsafe { std::slice::from_raw_parts(at as *const u8, len) };
            send(sink, bytes)
        });
        drop(buf);
        result
    }

    /// Runs `call` on the open sink with the GIL released; an interruption aborts the session.
    fn with_sink<T: Send>(
        &self,
        py: Python<'_>,
        call: impl FnOnce(&mut rdma::RdmaSink) -> rdma::Result<T> + Send,
    ) -> PyResult<T> {
        let mut guard = lock(py, &self.inner)?;
        let sink = guard.as_mut().ok_or_else(closed_error)?;
        match py.detach(|| call(sink)) {
            Ok(v) => Ok(v),
            Err(rdma::Error::Interrupted) => {
                if let Some(sink) = guard.take() {
                    py.detach(|| sink.abort("the sender was interrupted (Ctrl-C)"));
                }
                Err(raise(py, rdma::Error::Interrupted))
            }
            Err(e) => Err(raise(py, e)),
        }
    }
}

#[pymethods]
impl RdmaSink {
    /// Connects to a server at `addr` (`"host:port"` or `(host, port)`) and sends to it.
    #[staticmethod]
    #[pyo3(signature = (addr, **options))]
    fn connect(
        py: Python<'_>,
        addr: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let addr = socket_addr(addr)?;
        let config = options::config(py, options)?;
        let sink = py
            .detach(|| rdma::RdmaSink::connect(addr, &config))
            .map_err(|e| raise(py, e))?;
        Self::wrap(py, sink)
    }

    /// Sends one message: any C-contiguous buffer (bytes, bytearray, memoryview, numpy
    /// array); zero-length is a message like any other. Blocks while the receiver has no free
    /// slot.
    fn send(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        self.send_buffer(py, data, rdma::RdmaSink::send)
    }

    /// Sends one `length`-byte message that `fill` writes straight into the registered slot:
    /// `fill(view)` gets a writable memoryview-compatible object of exactly `length` bytes,
    /// valid only during the call. If `fill` raises, the session is aborted (the message
    /// already in the slot must not count as sent) and the exception propagates.
    fn send_in_place(&self, py: Python<'_>, length: usize, fill: Py<PyAny>) -> PyResult<()> {
        let outcome: Mutex<Option<Lent>> = Mutex::new(None);
        let result = self.with_sink(py, |sink| {
            sink.send_in_place(length, |slot| {
                let lent = Python::attach(|py| SlotView::lend(py, slot, &fill));
                if let Ok(mut o) = outcome.lock() {
                    *o = Some(lent);
                }
            })
        });
        let lent = outcome.lock().ok().and_then(|mut o| o.take());
        match lent {
            Some(Lent::Failed(e)) => {
                if let Some(sink) = lock(py, &self.inner)?.take() {
                    py.detach(|| sink.abort("the sender's fill function failed"));
                }
                Err(e)
            }
            Some(Lent::ViewKept(e)) => {
                if let Some(mut sink) = lock(py, &self.inner)?.take() {
                    py.detach(|| sink.abort_in_place("the sender kept a view of its send slot"));
                    // A view of the slot is alive in Python: its memory must stay allocated for
                    // the rest of the process (a leak, on misuse only).
                    std::mem::forget(sink);
                }
                Err(e)
            }
            Some(Lent::Filled) | None => result,
        }
    }

    /// Like `send`, without waiting: raises BlockingIOError when no credit is free (nothing
    /// was sent; wait until `fileno()` is readable and try again). On tcp, bytes the kernel did
    /// not take yet are handed on by the next call, or `try_flush`.
    fn try_send(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<()> {
        self.send_buffer(py, data, rdma::RdmaSink::try_send)
    }

    /// Hands on what a `try_send` left queued (tcp only): BlockingIOError while bytes remain.
    fn try_flush(&self, py: Python<'_>) -> PyResult<()> {
        self.with_sink(py, rdma::RdmaSink::try_flush)
    }

    /// Like `finish`, without waiting: the count once the receiver has every message, else
    /// BlockingIOError (the stream is ending: `send` raises Closed from now on).
    fn try_finish(&self, py: Python<'_>) -> PyResult<u64> {
        let count = self.with_sink(py, rdma::RdmaSink::try_finish)?;
        let finished = lock(py, &self.inner)?.take();
        py.detach(|| drop(finished));
        Ok(count)
    }

    /// The readiness descriptor: readable when `try_send`, `try_flush` or `try_finish` may
    /// make progress (armed by one that raised BlockingIOError). Never read it.
    fn fileno(&self, py: Python<'_>) -> PyResult<i32> {
        let guard = lock(py, &self.inner)?;
        guard
            .as_ref()
            .map(|s| s.as_raw_fd())
            .ok_or_else(closed_error)
    }

    /// Ends the stream: waits until the receiver has every message, then returns the count.
    fn finish(&self, py: Python<'_>) -> PyResult<u64> {
        let sink = lock(py, &self.inner)?.take().ok_or_else(closed_error)?;
        py.detach(|| sink.finish()).map_err(|e| raise(py, e))
    }

    /// Aborts the session; the receiver sees `Rejected(reason)`. Does nothing when closed.
    #[pyo3(signature = (reason = "the sender aborted"))]
    fn abort(&self, py: Python<'_>, reason: &str) -> PyResult<()> {
        if let Some(sink) = lock(py, &self.inner)?.take() {
            py.detach(|| sink.abort(reason));
        }
        Ok(())
    }

    /// What was chosen and negotiated.
    #[getter]
    fn info(&self, py: Python<'_>) -> Py<SessionInfo> {
        self.info.clone_ref(py)
    }

    /// How many times the session resumed after its connection broke (`resume_timeout`).
    #[getter]
    fn resumes(&self) -> u32 {
        self.resumes.get().resumes
    }

    /// Messages sent again after those resumes (sent before a break, not arrived).
    #[getter]
    fn messages_resent(&self) -> u64 {
        self.resumes.get().messages_resent
    }

    /// Paths (`paths`) a resume left out after one of their queue pairs failed.
    #[getter]
    fn paths_lost(&self) -> u32 {
        self.resumes.get().paths_lost
    }

    /// Paths left out that a later resume took back.
    #[getter]
    fn paths_rebuilt(&self) -> u32 {
        self.resumes.get().paths_rebuilt
    }

    /// Bytes each path carried, path 0 first (`paths`; empty with one queue pair).
    #[getter]
    fn path_bytes(&self) -> Vec<u64> {
        self.paths.bytes()
    }

    /// Messages sent so far (0 once finished or aborted).
    #[getter]
    fn sent(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(lock(py, &self.inner)?
            .as_ref()
            .map_or(0, rdma::RdmaSink::sent))
    }

    /// The largest message `send` accepts.
    #[getter]
    fn max_message_size(&self) -> PyResult<u32> {
        Ok(self.info.get().max_message_size)
    }

    /// True once finished or aborted.
    #[getter]
    fn closed(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(lock(py, &self.inner)?.is_none())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// A clean exit finishes the stream (when still open); an exception aborts it.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        match exc_type {
            None if !self.closed(py)? => self.finish(py).map(|_| false),
            None => Ok(false),
            Some(_) => self
                .abort(py, "the sender ended with an exception")
                .map(|()| false),
        }
    }
}

/// The receiving end of a session. `recv()` returns a [`Message`] viewing the receive slot
/// without a copy, or None at the end of the stream.
#[pyclass(frozen, module = "rdma_container")]
struct RdmaSrc {
    inner: Mutex<rdma::RdmaSrc>,
    /// The last message handed out: the next `recv` ends its lease (or refuses to).
    lease: Mutex<Option<Arc<Lease>>>,
    info: Py<SessionInfo>,
    resumes: rdma::ResumeCounters,
    paths: rdma::PathCounters,
}

impl RdmaSrc {
    fn wrap(py: Python<'_>, src: rdma::RdmaSrc) -> PyResult<Self> {
        let info = Py::new(py, SessionInfo::new(src.info()))?;
        Ok(Self {
            resumes: src.resume_counters(),
            paths: src.path_counters(),
            inner: Mutex::new(src),
            lease: Mutex::new(None),
            info,
        })
    }

    /// Ends the last message's lease, or raises BufferError while a view of it is exported.
    fn end_lease(&self, py: Python<'_>) -> PyResult<()> {
        let mut lease = lock(py, &self.lease)?;
        if let Some(last) = lease.as_ref() {
            last.try_release()?;
        }
        *lease = None;
        Ok(())
    }

    /// Receives the next message with the GIL released and hands it to `take` (with the GIL
    /// and the session's lock held, so no other recv can reuse the slot meanwhile): `None` at
    /// the end of the stream.
    fn next_with<T>(
        &self,
        py: Python<'_>,
        receive: Receive,
        take: impl FnOnce(Python<'_>, &[u8]) -> PyResult<T>,
    ) -> PyResult<Option<T>> {
        // The session's lock first, then the lease's (always in this order): between ending
        // the last lease and handing out the next message no other thread's recv can run.
        let mut src = lock(py, &self.inner)?;
        self.end_lease(py)?;
        let received = {
            let src = &mut *src;
            py.detach(move || receive(src).map(|m| m.map(|s| (s.as_ptr() as usize, s.len()))))
        };
        match received {
            Ok(Some((at, len))) => {
                // SAFETY: the library's slice for this message, valid until the next recv on
                // `src`, which cannot happen while we hold its lock.
                let bytes = unsafe { std::slice::from_raw_parts(at as *const u8, len) };
                take(py, bytes).map(Some)
            }
            Ok(None) => Ok(None),
            Err(e) => Err(failed(py, &mut src, e)),
        }
    }
}

/// A receive's failure as Python sees it: an interruption aborts the session (the exception a
/// signal handler raised propagates).
fn failed(py: Python<'_>, src: &mut rdma::RdmaSrc, e: rdma::Error) -> PyErr {
    if let rdma::Error::Interrupted = e {
        py.detach(|| src.abort_in_place("the receiver was interrupted (Ctrl-C)"));
    }
    raise(py, e)
}

impl RdmaSrc {}

/// How `next_with` receives: blocking (`recv`) or not (`try_recv`).
type Receive = for<'a> fn(&'a mut rdma::RdmaSrc) -> rdma::Result<Option<&'a [u8]>>;

impl RdmaSrc {
    /// The next message as a zero-copy `Message` (its lease recorded), received by `receive`.
    fn next_message(slf: &Bound<'_, Self>, receive: Receive) -> PyResult<Option<Message>> {
        let py = slf.py();
        let this = slf.get();
        // The lease is recorded while the session's lock is held (inside next_with).
        this.next_with(py, receive, |py, bytes| {
            let message = Message::new(slf.clone().unbind(), bytes);
            *lock(py, &this.lease)? = Some(message.lease());
            Ok(message)
        })
    }
}

#[pymethods]
impl RdmaSrc {
    /// Connects to a server at `addr` (`"host:port"` or `(host, port)`) and receives from it.
    #[staticmethod]
    #[pyo3(signature = (addr, **options))]
    fn connect(
        py: Python<'_>,
        addr: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let addr = socket_addr(addr)?;
        let config = options::config(py, options)?;
        let src = py
            .detach(|| rdma::RdmaSrc::connect(addr, &config))
            .map_err(|e| raise(py, e))?;
        Self::wrap(py, src)
    }

    /// The next message, viewing the receive slot without a copy, or None at the end of the
    /// stream. Raises BufferError while a view of the previous message is still exported.
    fn recv(slf: &Bound<'_, Self>) -> PyResult<Option<Message>> {
        Self::next_message(slf, rdma::RdmaSrc::recv)
    }

    /// Like `recv`, without waiting: raises BlockingIOError when no message has arrived (then
    /// wait until `fileno()` is readable, as `rdma_container.aio` does, and try again).
    fn try_recv(slf: &Bound<'_, Self>) -> PyResult<Option<Message>> {
        Self::next_message(slf, rdma::RdmaSrc::try_recv)
    }

    /// The next message as bytes (a copy), or None at the end of the stream.
    fn recv_bytes(&self, py: Python<'_>) -> PyResult<Option<Py<PyBytes>>> {
        self.next_with(py, rdma::RdmaSrc::recv, |py, bytes| {
            Ok(PyBytes::new(py, bytes).unbind())
        })
    }

    /// Like `recv_bytes`, without waiting (BlockingIOError when no message has arrived).
    fn try_recv_bytes(&self, py: Python<'_>) -> PyResult<Option<Py<PyBytes>>> {
        self.next_with(py, rdma::RdmaSrc::try_recv, |py, bytes| {
            Ok(PyBytes::new(py, bytes).unbind())
        })
    }

    /// The readiness descriptor: readable when `try_recv` may make progress (armed by a
    /// `try_recv` that raised BlockingIOError; wake-ups may be spurious). Never read it.
    fn fileno(&self, py: Python<'_>) -> PyResult<i32> {
        Ok(lock(py, &self.inner)?.as_raw_fd())
    }

    /// Copies the next message into `buffer` (writable, C-contiguous, any length) and returns
    /// its length, or None at the end of the stream. A message longer than `buffer` raises
    /// MessageTooLarge (`length`: the message's, `max`: the buffer's) and stays to be received
    /// by the next call: nothing is lost.
    fn recv_into(&self, py: Python<'_>, buffer: &Bound<'_, PyAny>) -> PyResult<Option<usize>> {
        let (buf, capacity) = contiguous_bytes(buffer, true)?;
        let at = buf.buf_ptr() as usize;
        // The session's lock, then the lease's, as in next_with.
        let mut src = lock(py, &self.inner)?;
        self.end_lease(py)?;
        let received = {
            let src = &mut *src;
            py.detach(move || {
                // SAFETY: `buf` keeps the target exported and writable (checked by
                // contiguous_bytes) and `capacity` bytes long until after this call; it is
                // Python memory, never a receive slot, so the copy's ends do not overlap.
                let target = unsafe { std::slice::from_raw_parts_mut(at as *mut u8, capacity) };
                src.recv_into(target)
            })
        };
        drop(buf);
        received.map_err(|e| failed(py, &mut src, e))
    }

    /// Aborts the session (the sender sees `Rejected(reason)`) unless the stream has ended.
    /// A view of the last message stays readable memory (its contents may be stale).
    #[pyo3(signature = (reason = "the receiver aborted"))]
    fn abort(&self, py: Python<'_>, reason: &str) -> PyResult<()> {
        let mut src = lock(py, &self.inner)?;
        let src = &mut *src;
        py.detach(|| src.abort_in_place(reason));
        Ok(())
    }

    /// What was chosen and negotiated.
    #[getter]
    fn info(&self, py: Python<'_>) -> Py<SessionInfo> {
        self.info.clone_ref(py)
    }

    /// How many times the session resumed after its connection broke (`resume_timeout`).
    #[getter]
    fn resumes(&self) -> u32 {
        self.resumes.get().resumes
    }

    /// Messages the sender sent again after those resumes.
    #[getter]
    fn messages_resent(&self) -> u64 {
        self.resumes.get().messages_resent
    }

    /// Paths (`paths`) a resume left out after one of their queue pairs failed.
    #[getter]
    fn paths_lost(&self) -> u32 {
        self.resumes.get().paths_lost
    }

    /// Paths left out that a later resume took back.
    #[getter]
    fn paths_rebuilt(&self) -> u32 {
        self.resumes.get().paths_rebuilt
    }

    /// Bytes each path carried, path 0 first (`paths`; empty with one queue pair).
    #[getter]
    fn path_bytes(&self) -> Vec<u64> {
        self.paths.bytes()
    }

    /// Messages delivered so far.
    #[getter]
    fn received(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(lock(py, &self.inner)?.received())
    }

    /// The largest message this session carries.
    #[getter]
    fn max_message_size(&self) -> u32 {
        self.info.get().max_message_size
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(slf: &Bound<'_, Self>) -> PyResult<Option<Message>> {
        Self::recv(slf)
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Aborts the session unless the stream has ended (on any exit: a receiver that stops
    /// reading before the end has not consumed the stream).
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.abort(py, "the receiver closed before the end of the stream")
            .map(|()| false)
    }
}

/// A client whose hello arrived at a [`Listener`]: accept it in a role, or refuse it.
#[pyclass(frozen, module = "rdma_container")]
struct Incoming {
    inner: Mutex<Option<rdma::Incoming>>,
    /// `(host, port)`.
    #[pyo3(get)]
    peer_addr: (String, u16),
    /// `"sender"` (the client wants to send to us) or `"receiver"`.
    #[pyo3(get)]
    peer_role: String,
    /// The client's configured credits.
    #[pyo3(get)]
    peer_credits: u16,
    /// The queue pairs the client stripes over (the session will have as many).
    #[pyo3(get)]
    peer_qps: u8,
    /// The client's largest message.
    #[pyo3(get)]
    peer_max_message_size: usize,
}

impl Incoming {
    fn new(incoming: rdma::Incoming) -> Self {
        let peer = incoming.peer_addr();
        Self {
            peer_addr: (peer.ip().to_string(), peer.port()),
            peer_role: incoming.peer_role().to_string(),
            peer_credits: incoming.peer_credits(),
            peer_qps: incoming.peer_qps(),
            peer_max_message_size: incoming.peer_max_message_size(),
            inner: Mutex::new(Some(incoming)),
        }
    }

    fn take(&self, py: Python<'_>) -> PyResult<rdma::Incoming> {
        lock(py, &self.inner)?
            .take()
            .ok_or_else(|| PyRuntimeError::new_err("this client was already accepted or refused"))
    }
}

#[pymethods]
impl Incoming {
    /// Accepts the client as its receiver (the client sends).
    fn accept_src(&self, py: Python<'_>) -> PyResult<RdmaSrc> {
        let incoming = self.take(py)?;
        let src = py
            .detach(|| incoming.accept_src())
            .map_err(|e| raise(py, e))?;
        RdmaSrc::wrap(py, src)
    }

    /// Accepts the client as its sender (the client receives).
    fn accept_sink(&self, py: Python<'_>) -> PyResult<RdmaSink> {
        let incoming = self.take(py)?;
        let sink = py
            .detach(|| incoming.accept_sink())
            .map_err(|e| raise(py, e))?;
        RdmaSink::wrap(py, sink)
    }

    /// Refuses the client, telling it why (it sees `Rejected(reason)`).
    fn refuse(&self, py: Python<'_>, reason: &str) -> PyResult<()> {
        let incoming = self.take(py)?;
        py.detach(|| incoming.refuse(reason));
        Ok(())
    }

    fn __repr__(&self) -> String {
        format!(
            "Incoming(peer_addr={:?}, peer_role={:?})",
            self.peer_addr, self.peer_role
        )
    }
}

/// How long one `Listener.accept` slice holds the listener.
const ACCEPT_SLICE: Duration = Duration::from_millis(100);

/// Listens for clients on one address (use the RoCE network's address: the device is chosen
/// from it). Hellos are read in the background; `accept()` returns the next client.
#[pyclass(frozen, module = "rdma_container")]
struct Listener {
    inner: Mutex<Option<rdma::Listener>>,
    /// `(host, port)` the listener is bound to (the real port when bound to port 0).
    #[pyo3(get)]
    local_addr: (String, u16),
}

impl Listener {
    fn with_listener<T: Send>(
        &self,
        py: Python<'_>,
        call: impl FnOnce(&mut rdma::Listener) -> rdma::Result<T> + Send,
    ) -> PyResult<T> {
        let mut guard = lock(py, &self.inner)?;
        let listener = guard
            .as_mut()
            .ok_or_else(|| PyRuntimeError::new_err("the listener is closed"))?;
        py.detach(|| call(listener)).map_err(|e| raise(py, e))
    }
}

#[pymethods]
impl Listener {
    #[new]
    #[pyo3(signature = (addr, **options))]
    fn new(
        py: Python<'_>,
        addr: &Bound<'_, PyAny>,
        options: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let addr = socket_addr(addr)?;
        let config = options::config(py, options)?;
        let listener = py
            .detach(|| rdma::Listener::bind(addr, &config))
            .map_err(|e| raise(py, e))?;
        let bound = listener.local_addr();
        Ok(Self {
            inner: Mutex::new(Some(listener)),
            local_addr: (bound.ip().to_string(), bound.port()),
        })
    }

    /// Waits for the next client; with `timeout` (seconds), returns None when none came.
    /// Waits in short slices, so that `close()` from another thread is not held up.
    #[pyo3(signature = (timeout = None))]
    fn accept(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Incoming>> {
        let deadline = timeout
            .map(options::seconds)
            .transpose()?
            .map(|t| Instant::now() + t);
        let incoming = loop {
            let slice = deadline.map_or(ACCEPT_SLICE, |d| {
                d.saturating_duration_since(Instant::now())
                    .min(ACCEPT_SLICE)
            });
            if let Some(i) = self.with_listener(py, |l| l.accept_timeout(slice))? {
                break i;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(None);
            }
        };
        Ok(Some(Incoming::new(incoming)))
    }

    /// Like `accept`, without waiting: the next client whose hello arrived, or BlockingIOError
    /// (wait until `fileno()` is readable). Accepting it in a role still runs its handshake.
    fn try_accept(&self, py: Python<'_>) -> PyResult<Incoming> {
        let incoming = self.with_listener(py, |l| l.try_accept())?;
        Ok(Incoming::new(incoming))
    }

    /// The readiness descriptor: readable while a client's hello waits. Never read it.
    fn fileno(&self, py: Python<'_>) -> PyResult<i32> {
        let guard = lock(py, &self.inner)?;
        guard
            .as_ref()
            .map(|l| l.as_raw_fd())
            .ok_or_else(|| PyRuntimeError::new_err("the listener is closed"))
    }

    /// Accepts both directions with one client that called `duplex_connect`: returns
    /// `(sink, src)`.
    fn accept_duplex(&self, py: Python<'_>) -> PyResult<(RdmaSink, RdmaSrc)> {
        let (sink, src) = self.with_listener(py, |l| l.accept_duplex())?;
        Ok((RdmaSink::wrap(py, sink)?, RdmaSrc::wrap(py, src)?))
    }

    /// Stops listening (clients waiting for `accept` are dropped).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let listener = lock(py, &self.inner)?.take();
        py.detach(|| drop(listener));
        Ok(())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.close(py).map(|()| false)
    }
}

/// Connects both directions to a server that calls `Listener.accept_duplex()`: returns
/// `(sink, src)`.
#[pyfunction]
#[pyo3(signature = (addr, **options))]
fn duplex_connect(
    py: Python<'_>,
    addr: &Bound<'_, PyAny>,
    options: Option<&Bound<'_, PyDict>>,
) -> PyResult<(RdmaSink, RdmaSrc)> {
    let addr = socket_addr(addr)?;
    let config = options::config(py, options)?;
    let (sink, src) = py
        .detach(|| rdma::duplex::connect(addr, &config))
        .map_err(|e| raise(py, e))?;
    Ok((RdmaSink::wrap(py, sink)?, RdmaSrc::wrap(py, src)?))
}

/// What `rdma-container doctor --json` prints, as a dict: the GID table, the device choice
/// toward `peer` (or from `local_ip`), memlock, CAP_IPC_LOCK, /dev/infiniband and problems.
#[pyfunction]
#[pyo3(signature = (peer = None, *, local_ip = None, device = None, ib_port = None, gid_index = None, sysfs_root = "/sys"))]
fn doctor<'py>(
    py: Python<'py>,
    peer: Option<&str>,
    local_ip: Option<&str>,
    device: Option<String>,
    ib_port: Option<u32>,
    gid_index: Option<u32>,
    sysfs_root: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let ip = |text: Option<&str>| {
        text.map(|t| {
            t.parse()
                .map_err(|e| PyValueError::new_err(format!("bad IPv4 address {t:?}: {e}")))
        })
        .transpose()
    };
    let request = rdma::doctor::DoctorRequest {
        peer: ip(peer)?,
        local_ip: ip(local_ip)?,
        overrides: rdma::roce::Overrides {
            device,
            port: ib_port,
            gid_index,
        },
        sysfs_root: sysfs_root.into(),
    };
    let (report, _table) = py.detach(|| rdma::doctor::examine(&request));
    let json = serde_json::to_string(&report)
        .map_err(|e| PyRuntimeError::new_err(format!("cannot encode the report: {e}")))?;
    py.import("json")?.call_method1("loads", (json,))
}

/// The transports compiled into this build, in the order `auto` prefers them.
#[pyfunction]
fn compiled_in_transports(py: Python<'_>) -> PyResult<Bound<'_, PyTuple>> {
    PyTuple::new(
        py,
        rdma::compiled_in_transports()
            .iter()
            .map(|k| k.name())
            .collect::<Vec<_>>(),
    )
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    interrupt::remember_main_thread(m.py())?;
    m.add_class::<RdmaSink>()?;
    m.add_class::<RdmaSrc>()?;
    m.add_class::<Message>()?;
    m.add_class::<SlotView>()?;
    m.add_class::<Listener>()?;
    m.add_class::<Incoming>()?;
    m.add_class::<SessionInfo>()?;
    m.add_function(wrap_pyfunction!(duplex_connect, m)?)?;
    m.add_function(wrap_pyfunction!(doctor, m)?)?;
    m.add_function(wrap_pyfunction!(compiled_in_transports, m)?)?;
    m.add("DEFAULT_MAX_MSG_SIZE", rdma::DEFAULT_MAX_MSG_SIZE)?;
    m.add("DEFAULT_CREDITS", rdma::DEFAULT_CREDITS)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::add_to(m)?;
    Ok(())
}
