"""Both ends of a session on one asyncio event loop: a server that receives with
``async for`` and a client that sends with ``await sink.send(...)``, over 127.0.0.1.

    python asyncio_pair.py --count 10000
"""

import argparse
import asyncio

import rdma_container as rc
import rdma_container.aio as rca


async def receive(listener: rca.AsyncListener) -> int:
    src = await rca.accept_src(await listener.accept())
    count = 0
    async with src:
        async for msg in src:
            with msg:  # a zero-copy view of the receive slot, until the next recv
                assert bytes(msg) == str(count).encode()
            count += 1
    return count


async def send(addr: tuple[str, int], count: int) -> int:
    async with await rca.connect_sink(addr) as sink:
        for i in range(count):
            await sink.send(str(i).encode())
        return await sink.finish()


async def main(count: int) -> None:
    listener = rca.AsyncListener(rc.Listener("127.0.0.1:0"))
    received, sent = await asyncio.gather(
        receive(listener), send(listener.listener.local_addr, count)
    )
    print(f"sent {sent}, received {received} messages over 127.0.0.1 on one event loop")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000)
    asyncio.run(main(parser.parse_args().count))
