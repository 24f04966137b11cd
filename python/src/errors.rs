//! The exception classes (all under `rdma_container.Error`) and the mapping from the library's
//! [`rdma_container::Error`], keeping the Rust message (with its sources) as the text.

use pyo3::create_exception;
use pyo3::exceptions::{PyBlockingIOError, PyException, PyKeyboardInterrupt};
use pyo3::prelude::*;
use pyo3::BoundObject;
use rdma_container as rdma;

create_exception!(
    rdma_container,
    Error,
    PyException,
    "Base class of every rdma-container error."
);
create_exception!(
    rdma_container,
    PeerLost,
    Error,
    "The peer vanished without ending the session; `.received` messages had arrived."
);
create_exception!(
    rdma_container,
    Rejected,
    Error,
    "The peer refused or aborted the session; `.reason` says why."
);
create_exception!(
    rdma_container,
    Refused,
    Error,
    "We refused the peer's hello (it was told why); `.reason` says why."
);
create_exception!(
    rdma_container,
    MessageTooLarge,
    Error,
    "A message is larger than the session carries; nothing was sent. `.length`, `.max`."
);
create_exception!(
    rdma_container,
    ProtocolError,
    Error,
    "The peer broke the wire protocol or sent garbage."
);
create_exception!(
    rdma_container,
    TransportUnavailable,
    Error,
    "The requested transport is not compiled in or cannot run here; `.transport`, `.reason`."
);
create_exception!(
    rdma_container,
    TransportError,
    Error,
    "The data path (tcp, verbs or DOCA) failed."
);
create_exception!(
    rdma_container,
    ConnectionFailed,
    Error,
    "Reaching, listening on or talking to the bootstrap address failed."
);
create_exception!(
    rdma_container,
    Timeout,
    Error,
    "A connect, handshake or idle deadline passed."
);
create_exception!(
    rdma_container,
    Closed,
    Error,
    "The session has already ended (finished, aborted or failed)."
);
create_exception!(
    rdma_container,
    NoRoceDevice,
    Error,
    "No RoCE v2 GID owns the source address, or a device override matches nothing."
);
create_exception!(
    rdma_container,
    InvalidConfig,
    Error,
    "A setting is out of range (credits, max_msg_size, ...)."
);

/// Adds the classes to the module.
pub(crate) fn add_to(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("PeerLost", py.get_type::<PeerLost>())?;
    m.add("Rejected", py.get_type::<Rejected>())?;
    m.add("Refused", py.get_type::<Refused>())?;
    m.add("MessageTooLarge", py.get_type::<MessageTooLarge>())?;
    m.add("ProtocolError", py.get_type::<ProtocolError>())?;
    m.add(
        "TransportUnavailable",
        py.get_type::<TransportUnavailable>(),
    )?;
    m.add("TransportError", py.get_type::<TransportError>())?;
    m.add("ConnectionFailed", py.get_type::<ConnectionFailed>())?;
    m.add("Timeout", py.get_type::<Timeout>())?;
    m.add("Closed", py.get_type::<Closed>())?;
    m.add("NoRoceDevice", py.get_type::<NoRoceDevice>())?;
    m.add("InvalidConfig", py.get_type::<InvalidConfig>())?;
    Ok(())
}

/// The error for a call on a finished or aborted session.
pub(crate) fn closed_error() -> PyErr {
    Closed::new_err(rdma::Error::Closed.to_string())
}

/// Sets attributes on a new exception; an attribute that cannot be set only loses detail.
fn with_attrs(py: Python<'_>, err: PyErr, attrs: &[(&str, Py<PyAny>)]) -> PyErr {
    let value = err.value(py);
    for (name, v) in attrs {
        // Setting an attribute on a fresh exception instance does not fail in practice.
        let _ = value.setattr(*name, v.clone_ref(py));
    }
    err
}

fn obj<'py, T>(py: Python<'py>, v: T) -> Py<PyAny>
where
    T: IntoPyObject<'py>,
{
    v.into_pyobject(py)
        .map(|b| b.into_any().unbind())
        .unwrap_or_else(|_| py.None())
}

/// The Python exception for a library error. [`rdma::Error::Interrupted`] becomes the
/// exception a signal handler raised during the wait (normally `KeyboardInterrupt`).
pub(crate) fn raise(py: Python<'_>, e: rdma::Error) -> PyErr {
    let text = e.chain();
    match e {
        rdma::Error::Interrupted => crate::interrupt::take_pending()
            .unwrap_or_else(|| PyKeyboardInterrupt::new_err("interrupted")),
        rdma::Error::PeerLost { messages, .. } => with_attrs(
            py,
            PeerLost::new_err(text),
            &[("received", obj(py, messages))],
        ),
        rdma::Error::Rejected(reason) => {
            with_attrs(py, Rejected::new_err(text), &[("reason", obj(py, reason))])
        }
        rdma::Error::Refused(reason) | rdma::Error::AuthenticationFailed(reason) => {
            with_attrs(py, Refused::new_err(text), &[("reason", obj(py, reason))])
        }
        rdma::Error::MessageTooLarge { len, max }
        | rdma::Error::BufferTooSmall { len, capacity: max } => with_attrs(
            py,
            MessageTooLarge::new_err(text),
            &[("length", obj(py, len)), ("max", obj(py, max))],
        ),
        rdma::Error::Protocol(_) | rdma::Error::Decode(_) => ProtocolError::new_err(text),
        rdma::Error::TransportUnavailable { transport, reason } => with_attrs(
            py,
            TransportUnavailable::new_err(text),
            &[
                ("transport", obj(py, transport)),
                ("reason", obj(py, reason)),
            ],
        ),
        rdma::Error::TransportIo { .. }
        | rdma::Error::TransportProtocol { .. }
        | rdma::Error::TransportClosed { .. }
        | rdma::Error::Verbs { .. }
        | rdma::Error::VerbsCompletion { .. }
        | rdma::Error::Doca { .. } => TransportError::new_err(text),
        rdma::Error::Listen { .. }
        | rdma::Error::Accept(_)
        | rdma::Error::Connect { .. }
        | rdma::Error::Socket { .. }
        | rdma::Error::ControlIo(_)
        | rdma::Error::Route { .. }
        | rdma::Error::NoRoute { .. }
        | rdma::Error::InterfaceAddrs(_) => ConnectionFailed::new_err(text),
        rdma::Error::HandshakeTimeout { .. }
        | rdma::Error::IdleTimeout { .. }
        | rdma::Error::DeadlinePassed { .. } => Timeout::new_err(text),
        rdma::Error::WouldBlock => PyBlockingIOError::new_err(text),
        rdma::Error::Closed => Closed::new_err(text),
        rdma::Error::NoRoceGid { .. } | rdma::Error::BadOverride(_) | rdma::Error::Sysfs { .. } => {
            NoRoceDevice::new_err(text)
        }
        rdma::Error::InvalidConfig(_) => InvalidConfig::new_err(text),
        _ => Error::new_err(text),
    }
}
