"""rdma-container from Python: message-oriented RDMA (RoCE v2 over DOCA or verbs, TCP where no
RDMA device is) with credit flow control.

    import rdma_container as rc

    with rc.Listener("10.0.0.2:5000") as listener:          # server
        src = listener.accept().accept_src()
        for msg in src:                                     # zero-copy views of the slots
            with msg:
                handle(memoryview(msg))

    with rc.RdmaSink.connect("10.0.0.2:5000") as sink:      # client; finish() on exit
        sink.send(b"hello")

Every blocking call releases the GIL; Ctrl-C raises KeyboardInterrupt within about 100 ms and
aborts the session (the peer sees it). Errors are subclasses of ``rdma_container.Error``.
See docs/python.md.
"""

from ._native import (
    DEFAULT_CREDITS,
    DEFAULT_MAX_MSG_SIZE,
    Closed,
    ConnectionFailed,
    Error,
    Incoming,
    InvalidConfig,
    Listener,
    Message,
    MessageTooLarge,
    NoRoceDevice,
    PeerLost,
    ProtocolError,
    RdmaSink,
    RdmaSrc,
    Refused,
    Rejected,
    SessionInfo,
    SlotView,
    Timeout,
    TransportError,
    TransportUnavailable,
    __version__,
    compiled_in_transports,
    doctor,
    duplex_connect,
)

__all__ = [
    "DEFAULT_CREDITS",
    "DEFAULT_MAX_MSG_SIZE",
    "Closed",
    "ConnectionFailed",
    "Error",
    "Incoming",
    "InvalidConfig",
    "Listener",
    "Message",
    "MessageTooLarge",
    "NoRoceDevice",
    "PeerLost",
    "ProtocolError",
    "RdmaSink",
    "RdmaSrc",
    "Refused",
    "Rejected",
    "SessionInfo",
    "SlotView",
    "Timeout",
    "TransportError",
    "TransportUnavailable",
    "__version__",
    "compiled_in_transports",
    "doctor",
    "duplex_connect",
]
