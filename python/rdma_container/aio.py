"""rdma-container for asyncio: ``await src.recv()``, ``await sink.send(buf)``,
``async for msg in src``, ``async with``.

    import rdma_container.aio as rca

    async def serve(addr):
        listener = rca.AsyncListener(rc.Listener(addr))
        incoming = await listener.accept()
        async with await rca.accept_src(incoming) as src:
            async for msg in src:                  # zero-copy views, as with RdmaSrc
                with msg:
                    handle(memoryview(msg))

Every call tries the session's non-blocking method first (``try_recv``, ``try_send``, ...)
and, on BlockingIOError, waits for the session's readiness descriptor (``fileno()``) with
``loop.add_reader``: no thread per call. What still blocks, and so runs in the loop's default
executor: connecting, and accepting a client in a role (the handshake's round trips).

Cancellation: a cancelled ``recv`` loses no message (a message is taken and returned with no
await in between); a cancelled ``send`` has sent its message only if it had taken a credit
(then, on tcp, bytes the kernel did not take yet go with the next call or ``flush()``); a
cancelled ``finish`` leaves the stream ending, and ``finish`` may be awaited again. The
zero-copy guard holds across awaits: while a view of the last message is exported, the next
``recv`` raises BufferError, as the blocking one does.
"""

import asyncio
import weakref
from types import TracebackType
from typing import Any, Callable, Dict, List, Optional, Type, TypeVar

from . import Incoming, Listener, Message, RdmaSink, RdmaSrc

__all__ = [
    "AsyncListener",
    "AsyncRdmaSink",
    "AsyncRdmaSrc",
    "accept_sink",
    "accept_src",
    "connect_sink",
    "connect_src",
]

_T = TypeVar("_T")


#: The futures waiting for each descriptor, per event loop: asyncio keeps one reader callback
#: per descriptor, so several tasks waiting on one object (two accepts on a listener) share it.
_waiters: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Dict[int, List[asyncio.Future[None]]]]" = (
    weakref.WeakKeyDictionary()
)


async def _readable(fd: int) -> None:
    """Waits until ``fd`` is readable (or the wait is cancelled)."""
    loop = asyncio.get_running_loop()
    per_loop = _waiters.setdefault(loop, {})
    waiting = per_loop.get(fd)
    if waiting is None:
        waiting = per_loop[fd] = []

        def wake() -> None:
            loop.remove_reader(fd)
            for ready in per_loop.pop(fd, []):
                if not ready.done():
                    ready.set_result(None)

        loop.add_reader(fd, wake)
    ready: asyncio.Future[None] = loop.create_future()
    waiting.append(ready)
    try:
        await ready
    finally:
        # cancelled (or woken): the last waiter of a descriptor takes its reader away
        if per_loop.get(fd) is waiting and ready in waiting:
            waiting.remove(ready)
            if not waiting:
                del per_loop[fd]
                loop.remove_reader(fd)


async def _until_ready(attempt: Callable[[], _T], fileno: Callable[[], int]) -> _T:
    """Runs ``attempt`` until it does not raise BlockingIOError, waiting for the readiness
    descriptor in between: the one loop every call here runs."""
    while True:
        try:
            return attempt()
        except BlockingIOError:
            await _readable(fileno())


async def _in_executor(call: Callable[[], _T]) -> _T:
    return await asyncio.get_running_loop().run_in_executor(None, call)


class AsyncRdmaSrc:
    """An :class:`RdmaSrc` for asyncio."""

    def __init__(self, src: RdmaSrc) -> None:
        self.src = src

    async def recv(self) -> Optional[Message]:
        """The next message as a zero-copy view, or None at the end of the stream."""
        return await _until_ready(self.src.try_recv, self.src.fileno)

    async def recv_bytes(self) -> Optional[bytes]:
        """The next message as bytes (a copy), or None at the end of the stream."""
        return await _until_ready(self.src.try_recv_bytes, self.src.fileno)

    def __aiter__(self) -> "AsyncRdmaSrc":
        return self

    async def __anext__(self) -> Message:
        msg = await self.recv()
        if msg is None:
            raise StopAsyncIteration
        return msg

    async def __aenter__(self) -> "AsyncRdmaSrc":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.src.__exit__(exc_type, exc, tb)


class AsyncRdmaSink:
    """An :class:`RdmaSink` for asyncio."""

    def __init__(self, sink: RdmaSink) -> None:
        self.sink = sink

    async def send(self, data: Any) -> None:
        """Sends one message (any C-contiguous buffer) once a credit is free; the buffer may
        be reused when it returns."""
        await _until_ready(lambda: self.sink.try_send(data), self.sink.fileno)
        await self.flush()

    async def flush(self) -> None:
        """Hands on what a send left queued (tcp only; at once on RDMA)."""
        await _until_ready(self.sink.try_flush, self.sink.fileno)

    async def finish(self) -> int:
        """Ends the stream once the receiver has every message; returns the count."""
        return await _until_ready(self.sink.try_finish, self.sink.fileno)

    async def __aenter__(self) -> "AsyncRdmaSink":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if exc_type is None and not self.sink.closed:
            await self.finish()
        else:
            self.sink.abort("the sender failed" if exc_type else "the sender closed")


class AsyncListener:
    """A :class:`Listener` for asyncio."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener

    async def accept(self) -> Incoming:
        """The next client whose hello arrived; accept it with :func:`accept_src` or
        :func:`accept_sink`."""
        return await _until_ready(self.listener.try_accept, self.listener.fileno)


async def accept_src(incoming: Incoming) -> AsyncRdmaSrc:
    """Accepts the client as its receiver (its handshake runs in the default executor)."""
    return AsyncRdmaSrc(await _in_executor(incoming.accept_src))


async def accept_sink(incoming: Incoming) -> AsyncRdmaSink:
    """Accepts the client as its sender (its handshake runs in the default executor)."""
    return AsyncRdmaSink(await _in_executor(incoming.accept_sink))


async def connect_src(addr: Any, **options: Any) -> AsyncRdmaSrc:
    """``RdmaSrc.connect`` in the default executor."""
    return AsyncRdmaSrc(await _in_executor(lambda: RdmaSrc.connect(addr, **options)))


async def connect_sink(addr: Any, **options: Any) -> AsyncRdmaSink:
    """``RdmaSink.connect`` in the default executor."""
    return AsyncRdmaSink(await _in_executor(lambda: RdmaSink.connect(addr, **options)))
