"""rdma_container.aio: asyncio sessions on the readiness descriptor (loop.add_reader), the
non-blocking calls under them, cancellation and the zero-copy guard across awaits."""

import asyncio
import select
import threading
import time
from typing import Any, Dict, List

import pytest

import rdma_container as rc
import rdma_container.aio as rca
from conftest import JOIN_TIMEOUT


def payload(i: int) -> bytes:
    return bytes((i + j) % 256 for j in range(i % 3000))


def send_all(sink: rc.RdmaSink, count: int, pause_every: int = 0) -> int:
    for i in range(count):
        sink.send(payload(i))
        if pause_every and i % pause_every == 0:
            time.sleep(0.002)
    return sink.finish()


def test_try_recv_raises_blocking_io_error_until_a_message_arrives_and_fileno_wakes(serve, opts):
    go = threading.Event()

    def sender(sink: rc.RdmaSink) -> int:
        assert go.wait(JOIN_TIMEOUT)
        sink.send(b"first")
        return sink.finish()

    server = serve("sink", sender)
    src = rc.RdmaSrc.connect(server.addr, **opts)
    with pytest.raises(BlockingIOError):
        src.try_recv()
    fd = src.fileno()
    assert select.select([fd], [], [], 0.05)[0] == []
    go.set()
    assert select.select([fd], [], [], 10)[0] == [fd]
    got: List[bytes] = []
    deadline = time.monotonic() + 10
    while True:
        try:
            msg = src.try_recv_bytes()
        except BlockingIOError:
            assert time.monotonic() < deadline
            select.select([fd], [], [], 0.1)
            continue
        if msg is None:
            break
        got.append(msg)
    assert got == [b"first"]
    assert server.join() == 1


def test_async_for_receives_every_message_in_order(serve, opts):
    server = serve("sink", lambda sink: send_all(sink, 500))

    async def main() -> List[bytes]:
        out = []
        async with await rca.connect_src(server.addr, **opts) as src:
            async for msg in src:
                with msg:
                    out.append(bytes(msg))
        return out

    got = asyncio.run(main())
    assert got == [payload(i) for i in range(500)]
    assert server.join() == 500


def test_a_cancelled_recv_loses_no_message(serve, opts):
    count = 1500
    server = serve("sink", lambda sink: send_all(sink, count, pause_every=50))

    async def main() -> int:
        src = await rca.connect_src(server.addr, **opts)
        received, cancelled = 0, 0
        while True:
            try:
                data = await asyncio.wait_for(src.recv_bytes(), 0.0005)
            except (asyncio.TimeoutError, TimeoutError):
                cancelled += 1
                continue
            if data is None:
                break
            assert data == payload(received), f"message {received} after {cancelled} cancels"
            received += 1
        assert cancelled > 0, "no recv was ever cancelled: the test proved nothing"
        return received

    assert asyncio.run(main()) == count
    assert server.join() == count


def test_the_zero_copy_guard_holds_across_awaits(serve, opts):
    server = serve("sink", lambda sink: send_all(sink, 3))

    async def main() -> None:
        src = await rca.connect_src(server.addr, **opts)
        first = await src.recv()
        assert first is not None
        view = memoryview(first)
        await asyncio.sleep(0.05)
        assert bytes(view) == payload(0)
        with pytest.raises(BufferError):
            await src.recv()
        view.release()
        second = await src.recv()
        assert second is not None and bytes(second) == payload(1)
        second.release()
        rest = [bytes(m) async for m in src]
        assert rest == [payload(2)]

    asyncio.run(main())
    assert server.join() == 3


def test_async_sends_with_cancellations_deliver_exactly_the_completed_ones(serve, opts):
    release = threading.Event()

    def receiver(src: rc.RdmaSrc) -> List[bytes]:
        assert release.wait(JOIN_TIMEOUT)
        return [bytes(m) for m in src]

    server = serve("src", receiver)

    async def main() -> List[bytes]:
        sink = await rca.connect_sink(server.addr, **dict(opts, credits=2))
        done: List[bytes] = []
        for i in range(2):
            await sink.send(payload(i))
            done.append(payload(i))
        # no credit: these sends wait and are cancelled
        for i in range(100, 103):
            with pytest.raises((asyncio.TimeoutError, TimeoutError)):
                await asyncio.wait_for(sink.send(payload(i)), 0.03)
        release.set()
        for i in range(2, 40):
            await sink.send(payload(i))
            done.append(payload(i))
        assert await sink.finish() == 40
        return done

    done = asyncio.run(main())
    assert server.join() == done


def test_one_event_loop_serves_two_sessions_at_once(opts):
    listener = rc.Listener("127.0.0.1:0", **opts)
    addr = listener.local_addr
    results: Dict[int, Any] = {}

    def client(n: int) -> None:
        with rc.RdmaSink.connect(addr, **opts) as sink:
            for i in range(300):
                sink.send(f"{n}:{i}".encode())
            results[n] = sink.finish()

    async def main() -> List[List[bytes]]:
        served = rca.AsyncListener(listener)

        async def serve_one() -> List[bytes]:
            src = await rca.accept_src(await served.accept())
            return [bytes(m) async for m in src]

        both = asyncio.gather(serve_one(), serve_one())
        return list(await asyncio.wait_for(both, JOIN_TIMEOUT))

    clients = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(2)]
    for c in clients:
        c.start()
    streams = asyncio.run(main())
    for c in clients:
        c.join(JOIN_TIMEOUT)
    listener.close()
    by_client = sorted(streams, key=lambda s: s[0])
    assert by_client == [[f"{n}:{i}".encode() for i in range(300)] for n in range(2)]
    assert results == {0: 300, 1: 300}


def test_try_accept_raises_blocking_io_error_until_a_client_arrives(opts):
    with rc.Listener("127.0.0.1:0", **opts) as listener:
        with pytest.raises(BlockingIOError):
            listener.try_accept()
        fd = listener.fileno()
        assert select.select([fd], [], [], 0.05)[0] == []
        sender = threading.Thread(
            target=lambda: send_all(rc.RdmaSink.connect(listener.local_addr, **opts), 1),
            daemon=True,
        )
        sender.start()
        assert select.select([fd], [], [], 10)[0] == [fd]
        incoming = listener.try_accept()
        src = incoming.accept_src()
        assert [bytes(m) for m in src] == [payload(0)]
        sender.join(JOIN_TIMEOUT)
