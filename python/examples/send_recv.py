#!/usr/bin/env python3
"""A sender and a receiver with rdma_container.

    python send_recv.py                        # both ends in this process, over 127.0.0.1
    python send_recv.py --server 10.0.0.2:5000 # on the receiving host (its RoCE address)
    python send_recv.py --client 10.0.0.2:5000 # on the sending host

The sender sends COUNT messages "0", "1", ...; the receiver checks each one and prints the
count at the end of the stream.
"""

import argparse
import threading

import rdma_container as rc


def receive(listener: rc.Listener, count: int) -> int:
    incoming = listener.accept()
    assert incoming is not None  # accept() without a timeout waits for a client
    print(f"client {incoming.peer_addr} wants to be the {incoming.peer_role}")
    src = incoming.accept_src()
    print(src.info.description)
    expected = 0
    for msg in src:  # each msg views a receive slot: no copy
        with msg:
            text = bytes(msg).decode()  # a copy, so the view ends with the block
        if text != str(expected):
            raise SystemExit(f"message {expected} was {text!r}")
        expected += 1
    if expected != count:
        raise SystemExit(f"received {expected} of {count} messages")
    return expected


def send(addr: "str | tuple[str, int]", count: int, transport: str) -> int:
    with rc.RdmaSink.connect(addr, transport=transport) as sink:  # type: ignore[arg-type]
        for i in range(count):
            sink.send(str(i).encode())
        return sink.finish()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", metavar="IP:PORT")
    parser.add_argument("--client", metavar="IP:PORT")
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--transport", default="auto", choices=["auto", "tcp", "verbs", "doca"])
    args = parser.parse_args()
    if args.server:
        with rc.Listener(args.server, transport=args.transport) as listener:
            print(f"received {receive(listener, args.count)} messages")
    elif args.client:
        print(f"sent {send(args.client, args.count, args.transport)} messages")
    else:
        with rc.Listener("127.0.0.1:0", transport=args.transport) as listener:
            result: "dict[str, int]" = {}
            server = threading.Thread(target=lambda: result.update(n=receive(listener, args.count)))
            server.start()
            sent = send(listener.local_addr, args.count, args.transport)
            server.join()
            print(f"sent {sent}, received {result.get('n')} messages over 127.0.0.1")
            if result.get("n") != sent:
                raise SystemExit(1)


if __name__ == "__main__":
    main()
