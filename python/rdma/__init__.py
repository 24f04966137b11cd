"""Drop-in for the C++ reference's Python module ``rdma`` (pybind11 over DOCA), on rdma-container.

The reference's users write::

    import rdma
    dev, port, gid_idx = rdma.find_device(ip)
    args = rdma.RdmaArgs()
    args.dev, args.ip, args.port, args.gid_idx = dev, ip, 5555, gid_idx
    args.is_client, args.max_msg_bytes = True, 10 * 1024 * 1024
    sink = rdma.RdmaSink(args)      # the client connects, the server listens
    src = rdma.RdmaSrc(args)        # a second session on the same port
    sink.send(array)                # any C-contiguous buffer
    m = src.recv()                  # a uint8 numpy array (bytes without numpy)

and that code runs unchanged. What differs from the reference, and why (docs/python.md):

- ``recv()`` returns a fresh array holding a copy of the message (one memcpy of the message
  and one allocation: about 0.3 us at 64 B, 0.4 to 1 ms at 10 MiB), not a view of the receive
  slot: the reference's view is overwritten by
  the NIC two messages later while the application may still hold it. For zero-copy with a
  guard, use ``rdma_container.RdmaSrc`` (``Message``) directly.
- A zero-length message is data. The end of the stream (the sender's ``close()``, or its
  destruction) also makes ``recv()`` return an empty array, as the reference's EOS did, and
  sets ``src.ended``; later calls return an empty array at once.
- Errors raise ``rdma_container.Error`` subclasses (``PeerLost`` when the peer vanishes: the
  reference hangs); nothing calls ``exit()``.
- A server keeps one listener per (ip, port) for the life of the process, so the client's
  second session, which may arrive before the server creates its second object, waits in the
  listener's queue instead of being refused: sequential pairs on one port never race. Sessions
  are paired by the role the client asked for (its sink meets the server's src), whatever the
  order of creation.
- Where no RoCE v2 device owns the address, ``find_device`` warns and returns ``("", 0, 0)``,
  and the sessions run over TCP (``transport="auto"``); ``args.transport = "verbs"`` or
  ``"doca"`` makes RDMA mandatory.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Tuple

import rdma_container as _rc

_np: Any
try:
    import numpy as _np
except ImportError:  # numpy is optional: recv() then returns bytes
    _np = None

__all__ = ["RdmaArgs", "RdmaSink", "RdmaSrc", "find_device", "ensure_listener", "close_listeners"]


def find_device(ip: str) -> Tuple[str, int, int]:
    """The RDMA device, port and GID index for the source address toward ``ip`` (the route
    decides; pass the peer's or your own RoCE address).

    Returns ``("", 0, 0)`` with a ``RuntimeWarning`` when no RoCE v2 GID owns that address
    (the sessions then run over TCP with ``transport="auto"``).
    """
    report = _rc.doctor(peer=ip)
    choice = report.get("choice")
    if choice:
        return (str(choice["device"]), int(choice["port"]), int(choice["gid_index"]))
    problems = "; ".join(report.get("problems", [])) or "no RoCE v2 GID"
    warnings.warn(
        f"no RoCE v2 device for the address toward {ip}: sessions will use TCP ({problems})",
        RuntimeWarning,
        stacklevel=2,
    )
    return ("", 0, 0)


@dataclass
class RdmaArgs:
    """The reference's ``RdmaArgs``; the last two fields are ours."""

    dev: str = ""
    ip: str = ""
    port: int = 0
    gid_idx: int = 0
    is_client: bool = False
    max_msg_bytes: int = _rc.DEFAULT_MAX_MSG_SIZE
    #: ``"auto"`` (RDMA when the address has a RoCE v2 GID, else TCP), ``"tcp"``, ``"verbs"``,
    #: ``"doca"``.
    transport: str = "auto"
    #: Seconds a client keeps retrying to reach the server.
    connect_timeout: float = 30.0

    def options(self) -> Dict[str, Any]:
        """The ``rdma_container`` keyword arguments for these fields."""
        opts: Dict[str, Any] = {
            "transport": self.transport,
            "max_msg_size": int(self.max_msg_bytes),
            "connect_timeout": float(self.connect_timeout),
        }
        if self.dev:
            opts["device"] = self.dev
            opts["gid_index"] = int(self.gid_idx)
        return opts


class _SharedListener:
    """One listener per (ip, port), kept for the process. Clients are handed out by the role
    they asked for: a client that sends is for the server's ``RdmaSrc``."""

    def __init__(self, ip: str, port: int, options: Dict[str, Any]) -> None:
        self.listener = _rc.Listener((ip, port), **options)
        self.cond = threading.Condition()
        self.waiting: Dict[str, List[_rc.Incoming]] = {"sender": [], "receiver": []}
        self.accepting = False

    def take(self, peer_role: str) -> _rc.Incoming:
        """The next client that asked for ``peer_role``; one thread accepts at a time and queues
        clients of the other role for whoever wants them."""
        with self.cond:
            while True:
                if self.waiting[peer_role]:
                    return self.waiting[peer_role].pop(0)
                if self.accepting:
                    self.cond.wait(0.1)
                    continue
                self.accepting = True
                self.cond.release()
                incoming = None
                try:
                    incoming = self.listener.accept(timeout=0.1)
                finally:
                    self.cond.acquire()
                    self.accepting = False
                    if incoming is not None:
                        self.waiting.setdefault(incoming.peer_role, []).append(incoming)
                    self.cond.notify_all()


_listeners: Dict[Tuple[str, int], _SharedListener] = {}
_listeners_lock = threading.Lock()


def ensure_listener(args: RdmaArgs) -> Tuple[str, int]:
    """Starts (or finds) this process's listener for ``(args.ip, args.port)`` and returns the
    address it is bound to (with the real port when ``args.port`` is 0). Creating a server
    ``RdmaSink``/``RdmaSrc`` does this itself."""
    return _listener_for(args).listener.local_addr


def _listener_for(args: RdmaArgs) -> _SharedListener:
    key = (args.ip, int(args.port))
    with _listeners_lock:
        shared = _listeners.get(key)
        if shared is None:
            shared = _SharedListener(args.ip, int(args.port), args.options())
            _listeners[key] = shared
            bound = shared.listener.local_addr
            _listeners[(bound[0], bound[1])] = shared
        return shared


def close_listeners() -> None:
    """Closes every listener this process keeps (clients still queued are dropped)."""
    with _listeners_lock:
        for shared in set(_listeners.values()):
            shared.listener.close()
        _listeners.clear()


class RdmaSink:
    """The reference's sender: ``RdmaSink(args)`` connects (``is_client``) or waits for the
    peer's ``RdmaSrc`` on ``(args.ip, args.port)``. ``close()`` (or destruction, as in the
    reference) ends the stream."""

    def __init__(self, args: RdmaArgs) -> None:
        if args.is_client:
            self._sink = _rc.RdmaSink.connect((args.ip, int(args.port)), **args.options())
        else:
            self._sink = _listener_for(args).take("receiver").accept_sink()

    @property
    def info(self) -> _rc.SessionInfo:
        """What was chosen and negotiated (``info.transport``: tcp, verbs or doca)."""
        return self._sink.info

    def send(self, data: Any) -> None:
        """Sends one message: any C-contiguous buffer (numpy array, bytes, bytearray,
        memoryview). Zero-length is data. The buffer may be reused when this returns."""
        self._sink.send(data)

    def close(self) -> int:
        """Ends the stream (the peer's ``recv()`` returns an empty array, then ``ended``);
        returns the number of messages sent. Does nothing the second time."""
        if self._sink.closed:
            return 0
        return self._sink.finish()

    def __enter__(self) -> "RdmaSink":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is None:
            self.close()
        else:
            self._sink.abort("the sender ended with an exception")

    def __del__(self) -> None:
        sink = getattr(self, "_sink", None)
        if sink is not None and not sink.closed:
            try:
                sink.finish()
            except _rc.Error:
                pass


class RdmaSrc:
    """The reference's receiver: ``RdmaSrc(args)`` connects (``is_client``) or waits for the
    peer's ``RdmaSink`` on ``(args.ip, args.port)``."""

    def __init__(self, args: RdmaArgs) -> None:
        if args.is_client:
            self._src = _rc.RdmaSrc.connect((args.ip, int(args.port)), **args.options())
        else:
            self._src = _listener_for(args).take("sender").accept_src()
        #: True once the sender ended the stream.
        self.ended = False

    @property
    def info(self) -> _rc.SessionInfo:
        """What was chosen and negotiated."""
        return self._src.info

    def recv(self) -> Any:
        """The next message as a fresh, writable ``uint8`` numpy array (``bytes`` without
        numpy): a copy, so that arrays the application keeps are never overwritten. Empty at
        the end of the stream (then ``ended`` is True), as with the reference."""
        if self.ended:
            return _np.empty(0, dtype=_np.uint8) if _np is not None else b""
        if _np is None:
            data = self._src.recv_bytes()
            if data is None:
                self.ended = True
                return b""
            return data
        msg = self._src.recv()
        if msg is None:
            self.ended = True
            return _np.empty(0, dtype=_np.uint8)
        with msg:
            view = _np.frombuffer(msg, dtype=_np.uint8)
            array = view.copy()
            del view
        return array

    def close(self) -> None:
        """Stops receiving; before the end of the stream this aborts the session."""
        self._src.abort("the receiver closed")

    def __enter__(self) -> "RdmaSrc":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        self.close()
