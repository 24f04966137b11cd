"""Type stubs for rdma_container (the classes live in the compiled module _native)."""

from types import TracebackType
from typing import Any, Callable, Dict, Iterator, Literal, Optional, Tuple, Type, TypedDict, Union

from typing_extensions import Buffer, Self, Unpack, final

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

__version__: str
DEFAULT_MAX_MSG_SIZE: int
DEFAULT_CREDITS: int

_Address = Union[str, Tuple[str, int]]
_Transport = Literal["auto", "tcp", "verbs", "doca"]

class _Options(TypedDict, total=False):
    """Keyword arguments of every session and listener: the library's Config fields."""

    transport: _Transport
    credits: int
    max_msg_size: int
    device: Optional[str]
    ib_port: Optional[int]
    gid_index: Optional[int]
    sysfs_root: str
    connect_timeout: float
    handshake_timeout: float
    idle_timeout: Optional[float]
    busy_poll: Optional[float]
    auth_key_file: Optional[str]
    checksum: Literal["none", "crc32c"]
    resume_timeout: float

class Error(Exception): ...

class PeerLost(Error):
    received: int

class Rejected(Error):
    reason: str

class Refused(Error):
    reason: str

class MessageTooLarge(Error):
    length: int
    max: int

class ProtocolError(Error): ...

class TransportUnavailable(Error):
    transport: str
    reason: str

class TransportError(Error): ...
class ConnectionFailed(Error): ...
class Timeout(Error): ...
class Closed(Error): ...
class NoRoceDevice(Error): ...
class InvalidConfig(Error): ...

@final
class SessionInfo:
    @property
    def transport(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def peer(self) -> str: ...
    @property
    def interface(self) -> Optional[str]: ...
    @property
    def credits(self) -> int: ...
    @property
    def max_message_size(self) -> int: ...
    @property
    def mtu(self) -> Optional[int]: ...
    @property
    def device(self) -> Optional[str]: ...
    @property
    def ib_port(self) -> Optional[int]: ...
    @property
    def gid_index(self) -> Optional[int]: ...
    @property
    def gid(self) -> Optional[str]: ...
    @property
    def description(self) -> str: ...

@final
class Message(Buffer):
    """A received message viewing its slot (read-only buffer, format "B")."""

    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __len__(self) -> int: ...
    def tobytes(self) -> bytes: ...
    def release(self) -> None: ...
    @property
    def released(self) -> bool: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...

@final
class SlotView(Buffer):
    """A sender's staging slot, writable, lent to send_in_place's fill function."""

    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __len__(self) -> int: ...

@final
class RdmaSink:
    @staticmethod
    def connect(
        addr: _Address,
        **options: Unpack[_Options],
    ) -> RdmaSink: ...
    def send(self, data: Buffer) -> None: ...
    def send_in_place(self, length: int, fill: Callable[[SlotView], Any]) -> None: ...
    def finish(self) -> int: ...
    def abort(self, reason: str = ...) -> None: ...
    @property
    def info(self) -> SessionInfo: ...
    @property
    def sent(self) -> int: ...
    @property
    def resumes(self) -> int: ...
    @property
    def messages_resent(self) -> int: ...
    @property
    def max_message_size(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...

@final
class RdmaSrc:
    @staticmethod
    def connect(
        addr: _Address,
        **options: Unpack[_Options],
    ) -> RdmaSrc: ...
    def recv(self) -> Optional[Message]: ...
    def recv_bytes(self) -> Optional[bytes]: ...
    def recv_into(self, buffer: Buffer) -> Optional[int]: ...
    def abort(self, reason: str = ...) -> None: ...
    @property
    def info(self) -> SessionInfo: ...
    @property
    def received(self) -> int: ...
    @property
    def resumes(self) -> int: ...
    @property
    def messages_resent(self) -> int: ...
    @property
    def max_message_size(self) -> int: ...
    def __iter__(self) -> Iterator[Message]: ...
    def __next__(self) -> Message: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...

@final
class Incoming:
    @property
    def peer_addr(self) -> Tuple[str, int]: ...
    @property
    def peer_role(self) -> Literal["sender", "receiver"]: ...
    @property
    def peer_credits(self) -> int: ...
    @property
    def peer_max_message_size(self) -> int: ...
    def accept_src(self) -> RdmaSrc: ...
    def accept_sink(self) -> RdmaSink: ...
    def refuse(self, reason: str) -> None: ...

@final
class Listener:
    def __new__(cls, addr: _Address, **options: Unpack[_Options]) -> Self: ...
    def accept(self, timeout: Optional[float] = ...) -> Optional[Incoming]: ...
    def accept_duplex(self) -> Tuple[RdmaSink, RdmaSrc]: ...
    @property
    def local_addr(self) -> Tuple[str, int]: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None: ...

def duplex_connect(
    addr: _Address,
    **options: Unpack[_Options],
) -> Tuple[RdmaSink, RdmaSrc]: ...
def doctor(
    peer: Optional[str] = ...,
    *,
    local_ip: Optional[str] = ...,
    device: Optional[str] = ...,
    ib_port: Optional[int] = ...,
    gid_index: Optional[int] = ...,
    sysfs_root: str = ...,
) -> Dict[str, Any]: ...
def compiled_in_transports() -> Tuple[str, ...]: ...
