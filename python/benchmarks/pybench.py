#!/usr/bin/env python3
"""One side of the Python benchmark (scripts/python-bench.sh runs both and the Rust bench).

    pybench.py --server 127.0.0.1:PORT --credits N        # receive one stream, print JSON
    pybench.py --client 127.0.0.1:PORT --size B --count N --credits N

The client sends COUNT messages of SIZE bytes (one bytes object, sent again and again) and
finishes; it prints its elapsed time from the first send to finish() returning (the receiver
has everything), as messages per second and MiB/s. The server receives with recv(): each
message is a zero-copy view, released by the next recv().
"""

import argparse
import json
import time

import rdma_container as rc


def serve(addr: str, credits: int, transport: str) -> None:
    with rc.Listener(addr, transport=transport, credits=credits, max_msg_size=1 << 20) as listener:
        print("listening", flush=True)
        incoming = listener.accept(timeout=60)
        if incoming is None:
            raise SystemExit("no client")
        src = incoming.accept_src()
        count = 0
        size = 0
        started = time.perf_counter()
        for msg in src:
            count += 1
            size = len(msg)
        elapsed = time.perf_counter() - started
        print(json.dumps({"side": "server", "count": count, "size": size, "seconds": elapsed}))


def send(addr: str, size: int, count: int, transport: str) -> None:
    data = bytes(size)
    with rc.RdmaSink.connect(addr, transport=transport, max_msg_size=1 << 20, connect_timeout=30) as sink:
        send = sink.send
        started = time.perf_counter()
        for _ in range(count):
            send(data)
        sent = sink.finish()
        elapsed = time.perf_counter() - started
    print(
        json.dumps(
            {
                "side": "client",
                "count": sent,
                "size": size,
                "seconds": elapsed,
                "msg_per_s": sent / elapsed,
                "mib_per_s": sent * size / elapsed / 1048576,
            }
        )
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--server")
    p.add_argument("--client")
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--count", type=int, default=100_000)
    p.add_argument("--credits", type=int, default=16)
    p.add_argument("--transport", default="tcp")
    a = p.parse_args()
    if a.server:
        serve(a.server, a.credits, a.transport)
    elif a.client:
        send(a.client, a.size, a.count, a.transport)
    else:
        p.error("--server or --client")


if __name__ == "__main__":
    main()
