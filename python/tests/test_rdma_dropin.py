"""The `rdma` drop-in for the C++ reference's users: their full-duplex pattern on one port,
zero-length messages as data, arrays that stay intact while later messages arrive."""

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List

import pytest

import rdma
import rdma_container as rc

from conftest import JOIN_TIMEOUT

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

np = pytest.importorskip("numpy")  # python-test.sh installs numpy: never skipped in CI


@pytest.fixture(autouse=True)
def own_listeners():
    """Each test starts without the listeners (kept per process) of the tests before it."""
    yield
    rdma.close_listeners()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_tree(root: Path, files: Dict[str, bytes]) -> None:
    for name, data in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def read_tree(root: Path) -> Dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_file_push_example_runs_both_ways_at_once_on_one_port(tmp_path):
    a = {"big.bin": os.urandom(3 * 1024 * 1024 + 7), "empty": b"", "sub/dir/x.txt": b"x\n"}
    b = {"b.bin": os.urandom(100_000), "zero": b""}
    make_tree(tmp_path / "A", a)
    make_tree(tmp_path / "B", b)
    port = str(free_port())
    script = str(EXAMPLES / "file_push.py")
    node2 = subprocess.Popen(
        [sys.executable, script, "--node", "2", "--ip", "127.0.0.1", "--port", port,
         "--send", str(tmp_path / "A"), "--recv", str(tmp_path / "B_from_1")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    node1 = subprocess.Popen(
        [sys.executable, script, "--node", "1", "--ip", "127.0.0.1", "--port", port,
         "--send", str(tmp_path / "B"), "--recv", str(tmp_path / "A_from_2")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    outputs = []
    for node in (node1, node2):
        try:
            outputs.append(node.communicate(timeout=JOIN_TIMEOUT))
        except subprocess.TimeoutExpired:
            node1.kill()
            node2.kill()
            pytest.fail("the file push did not finish")
    assert node1.returncode == 0 and node2.returncode == 0, outputs
    assert "pushed 2 file(s), received 3" in outputs[0][0]
    assert "pushed 3 file(s), received 2" in outputs[1][0]
    assert read_tree(tmp_path / "A_from_2") == a
    assert read_tree(tmp_path / "B_from_1") == b


def args_for(port: int, is_client: bool) -> rdma.RdmaArgs:
    args = rdma.RdmaArgs()
    args.ip, args.port, args.is_client = "127.0.0.1", port, is_client
    args.max_msg_bytes = 1 << 20
    args.transport = "tcp"
    args.connect_timeout = 10.0
    return args


def test_sequential_duplex_pairs_on_one_port_keep_every_array_intact():
    server_args = args_for(0, False)
    host, port = rdma.ensure_listener(server_args)
    payloads = [b"", b"first", b"", b"x" * 70_000, b"last"]
    rounds = 3
    node2: Dict[str, Any] = {}

    def server() -> None:
        try:
            echoed = 0
            for _ in range(rounds):
                src = rdma.RdmaSrc(server_args)  # the reference's node 2: src first
                sink = rdma.RdmaSink(server_args)
                kept: List[Any] = []
                for _ in payloads:
                    kept.append(src.recv())  # every earlier array is still referenced
                assert src.recv().size == 0 and src.ended  # the client's end of stream
                for array in kept:
                    sink.send(array)
                    echoed += 1
                sink.close()
            node2["echoed"] = echoed
        except BaseException as e:
            node2["error"] = e

    thread = threading.Thread(target=server, daemon=True)
    thread.start()
    client_args = args_for(port, True)
    for _ in range(rounds):
        sink = rdma.RdmaSink(client_args)  # the reference's node 1: sink first
        src = rdma.RdmaSrc(client_args)
        for p in payloads:
            sink.send(np.frombuffer(p, dtype=np.uint8))
        sink.close()
        got = [src.recv() for _ in payloads]
        for array, p in zip(got, payloads):
            assert array.dtype == np.uint8 and array.tobytes() == p
            assert array.flags.writeable
        assert src.recv().size == 0 and src.ended
        assert src.recv().size == 0
    thread.join(JOIN_TIMEOUT)
    assert not thread.is_alive()
    assert "error" not in node2, node2.get("error")
    assert node2["echoed"] == rounds * len(payloads)


def test_find_device_warns_and_falls_back_where_no_roce_gid_owns_the_address():
    with pytest.warns(RuntimeWarning, match="TCP"):
        assert rdma.find_device("127.0.0.1") == ("", 0, 0)


def test_without_numpy_recv_returns_bytes(tmp_path):
    port = free_port()
    code = f"""
import sys, threading
sys.modules["numpy"] = None  # numpy cannot be imported
import rdma
server = rdma.RdmaArgs(ip="127.0.0.1", port={port}, transport="tcp")
client = rdma.RdmaArgs(ip="127.0.0.1", port={port}, is_client=True, transport="tcp")
rdma.ensure_listener(server)
out = []
def serve():
    src = rdma.RdmaSrc(server)
    out.extend([src.recv(), src.recv(), src.recv()])
t = threading.Thread(target=serve)
t.start()
sink = rdma.RdmaSink(client)
sink.send(b"abc")
sink.send(bytearray())
sink.close()
t.join(30)
print(out)
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=JOIN_TIMEOUT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[b'abc', b'', b'']"


def test_peer_loss_raises_instead_of_hanging():
    server_args = args_for(0, False)
    host, port = rdma.ensure_listener(server_args)
    result: Dict[str, Any] = {}
    first_arrived = threading.Event()

    def server() -> None:
        src = rdma.RdmaSrc(server_args)
        result["first"] = src.recv().tobytes()
        first_arrived.set()
        try:
            src.recv()
        except rc.Error as e:
            result["error"] = e

    thread = threading.Thread(target=server, daemon=True)
    thread.start()
    code = f"""
import os, sys, rdma
sink = rdma.RdmaSink(rdma.RdmaArgs(ip="127.0.0.1", port={port}, is_client=True, transport="tcp"))
sink.send(b"one")
sys.stdin.readline()  # until the server has the message
os._exit(0)
"""
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    try:
        assert first_arrived.wait(JOIN_TIMEOUT)
        child.communicate(b"die\n", timeout=JOIN_TIMEOUT)
    finally:
        child.kill()
    thread.join(JOIN_TIMEOUT)
    assert not thread.is_alive()
    assert result["first"] == b"one"
    assert isinstance(result.get("error"), rc.PeerLost)
    assert result["error"].received == 1
