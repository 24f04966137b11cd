#!/usr/bin/env python3
"""The reference's users' full-duplex file push, on the ``rdma`` drop-in, unchanged in shape.

Each node makes a sink and a src to the other on ONE port: node 1 connects (sink first, then
src), node 2 listens (src first, then sink). Each node then pushes a directory to the other
while receiving the other's, both ways at once:

    command byte (0 = push files), then for each file: its path, its content;
    a zero-length message ends the list; then the stream ends.

File contents go through one reused 10 MiB numpy buffer (the reference's users did this to
avoid re-registering memory; here send() copies into a registered slot anyway).

    python file_push.py --node 2 --ip 127.0.0.1 --port 5555 --send A --recv B_from_1 &
    python file_push.py --node 1 --ip 127.0.0.1 --port 5555 --send B --recv A_from_2
"""

import argparse
import threading
from pathlib import Path

import numpy as np

import rdma

PUSH_FILES = 0
MAX_MSG = 10 * 1024 * 1024


def push(sink: rdma.RdmaSink, root: Path) -> int:
    """Sends every file under ``root``; returns how many."""
    buf = np.empty(MAX_MSG, dtype=np.uint8)  # one buffer, reused for every file
    sink.send(np.array([PUSH_FILES], dtype=np.uint8))
    files = sorted(p for p in root.rglob("*") if p.is_file())
    for path in files:
        sink.send(np.frombuffer(str(path.relative_to(root)).encode(), dtype=np.uint8))
        with open(path, "rb") as f:
            n = f.readinto(buf.data)
            if f.read(1):
                raise SystemExit(f"{path} is larger than {MAX_MSG} bytes")
        sink.send(buf[:n])  # zero-length content is data, not the end of the list
    sink.send(np.empty(0, dtype=np.uint8))  # end of the list
    sink.close()  # end of the stream
    return len(files)


def pull(src: rdma.RdmaSrc, root: Path) -> int:
    """Receives a pushed list of files into ``root``; returns how many."""
    command = src.recv()
    if command.size != 1 or command[0] != PUSH_FILES:
        raise SystemExit(f"unexpected command {command!r}")
    count = 0
    while True:
        name = src.recv()
        if name.size == 0:
            break
        content = src.recv()  # `name` is still referenced here: it is never overwritten
        target = root / bytes(name).decode()
        if root.resolve() not in target.resolve().parents:
            raise SystemExit(f"refusing path {target}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content.tobytes())
        count += 1
    end = src.recv()
    if end.size != 0 or not src.ended:
        raise SystemExit("expected the end of the stream after the list")
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--node", type=int, choices=[1, 2], required=True, help="1 connects, 2 listens")
    parser.add_argument("--ip", required=True, help="node 2's RoCE address (127.0.0.1 on loopback)")
    parser.add_argument("--port", type=int, default=5555)
    parser.add_argument("--send", type=Path, required=True, help="directory to push")
    parser.add_argument("--recv", type=Path, required=True, help="directory to write the peer's files to")
    parser.add_argument("--transport", default="auto")
    opts = parser.parse_args()

    dev, port, gid_idx = rdma.find_device(opts.ip)
    args = rdma.RdmaArgs()
    args.dev, args.ip, args.port, args.gid_idx = dev, opts.ip, opts.port, gid_idx
    args.is_client = opts.node == 1
    args.max_msg_bytes = MAX_MSG
    args.transport = opts.transport
    if args.is_client:
        sink = rdma.RdmaSink(args)
        src = rdma.RdmaSrc(args)
    else:
        src = rdma.RdmaSrc(args)
        sink = rdma.RdmaSink(args)
    print(f"node {opts.node}: {sink.info.transport} both ways", flush=True)

    opts.recv.mkdir(parents=True, exist_ok=True)
    result: "dict[str, int]" = {}
    sender = threading.Thread(target=lambda: result.update(sent=push(sink, opts.send)))
    sender.start()
    result["received"] = pull(src, opts.recv)
    sender.join()
    print(f"node {opts.node}: pushed {result.get('sent')} file(s), received {result['received']}", flush=True)
    if "sent" not in result:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
