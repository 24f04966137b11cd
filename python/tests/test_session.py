"""Sessions through rdma_container: data, buffers, the view guard, ends and errors."""

import array
import threading
from typing import Any, Dict, List

import pytest

import rdma_container as rc
from conftest import Server

try:
    import numpy as np
except ImportError:
    np = None


def rejection_reason(src: rc.RdmaSrc) -> str:
    """Reads until the sender's abort, which must come; returns its reason."""
    with pytest.raises(rc.Rejected) as rejected:
        collect(src)
    return rejected.value.reason


def collect(src: rc.RdmaSrc) -> List[bytes]:
    """Every message to the end of the stream, as bytes."""
    out = []
    for msg in src:
        with msg:
            out.append(bytes(msg))
    return out


def test_ten_thousand_messages_arrive_in_order_and_finish_counts_them(serve, opts):
    server = serve("src", collect)
    with rc.RdmaSink.connect(server.addr, **opts) as sink:
        for i in range(10_000):
            sink.send(str(i).encode())
        assert sink.finish() == 10_000
    got = server.join()
    assert got == [str(i).encode() for i in range(10_000)]


def test_ten_thousand_messages_flow_from_server_to_client(serve, opts):
    def send_all(sink: rc.RdmaSink) -> int:
        for i in range(10_000):
            sink.send(i.to_bytes(4, "little"))
        return sink.finish()

    server = serve("sink", send_all)
    src = rc.RdmaSrc.connect(server.addr, **opts)
    count = 0
    while (data := src.recv_bytes()) is not None:
        assert int.from_bytes(data, "little") == count
        count += 1
    assert server.join() == 10_000
    assert count == 10_000 and src.received == 10_000


def test_zero_length_messages_are_data_not_the_end(serve, opts):
    server = serve("src", collect)
    with rc.RdmaSink.connect(server.addr, **opts) as sink:
        for payload in (b"", b"a", b"", b"", b"bc", b""):
            sink.send(payload)
    assert server.join() == [b"", b"a", b"", b"", b"bc", b""]


def buffer_kinds() -> List[Any]:
    kinds: List[Any] = [
        b"bytes",
        bytearray(b"bytearray"),
        memoryview(b"memoryview"),
        memoryview(b"0123456789")[2:5],
        array.array("i", [1, 2, 3]),
    ]
    if np is not None:
        kinds += [
            np.arange(7, dtype=np.uint8),
            np.arange(5, dtype=np.float64),
            np.arange(12, dtype=np.int32).reshape(3, 4),
            np.zeros(0, dtype=np.uint8),
        ]
    return kinds


def test_every_contiguous_buffer_kind_is_sent_byte_for_byte(serve, opts):
    kinds = buffer_kinds()
    server = serve("src", collect)
    with rc.RdmaSink.connect(server.addr, **opts) as sink:
        for k in kinds:
            sink.send(k)
    assert server.join() == [bytes(memoryview(k).cast("B")) for k in kinds]


def test_a_non_contiguous_buffer_is_refused_before_anything_is_sent(serve, opts):
    if np is None:
        pytest.skip("numpy is not installed")  # python-test.sh installs it: never skipped in CI
    server = serve("src", collect)
    with rc.RdmaSink.connect(server.addr, **opts) as sink:
        with pytest.raises(BufferError):
            sink.send(np.arange(10, dtype=np.uint8)[::2])
        with pytest.raises(BufferError):
            sink.send(memoryview(b"0123456789")[::3])
        sink.send(b"after")
    assert server.join() == [b"after"]


def test_numpy_view_of_a_message_reads_the_slot_without_a_copy(serve, opts):
    if np is None:
        pytest.skip("numpy is not installed")
    sent = np.arange(1000, dtype=np.uint16)

    def check(src: rc.RdmaSrc) -> bool:
        msg = src.recv()
        view = np.frombuffer(msg, dtype=np.uint16)
        same = bool((view == sent).all())
        assert not view.flags.writeable
        del view
        msg.release()
        assert src.recv() is None
        return same

    server = serve("src", check)
    with rc.RdmaSink.connect(server.addr, **opts) as sink:
        sink.send(sent)
    assert server.join()


def test_recv_raises_buffer_error_while_a_view_of_the_last_message_is_alive(serve, opts):
    def guarded(src: rc.RdmaSrc) -> List[str]:
        seen = []
        first = src.recv()
        view = memoryview(first)
        with pytest.raises(BufferError):
            src.recv()
        with pytest.raises(BufferError):
            first.release()
        assert bytes(view) == b"first"  # the slot was not handed back
        view.release()
        second = src.recv()  # no export left: the lease ends here
        assert first.released
        with pytest.raises(BufferError):
            memoryview(first)  # a released message exports nothing
        seen.append(bytes(second))
        with src.recv() as third:
            seen.append(bytes(third))
        assert third.released
        with pytest.raises(BufferError):
            memoryview(third)
        fourth = src.recv()
        with pytest.raises(TypeError):
            memoryview(fourth)[0:1] = b"x"  # read-only
        with pytest.raises((BufferError, TypeError)):
            _writable(fourth)  # a writable export is refused
        fourth.release()
        fourth.release()  # idempotent
        assert src.recv() is None
        return seen

    server = serve("src", guarded)
    with rc.RdmaSink.connect(server.addr, **opts) as sink:
        for payload in (b"first", b"second", b"third", b"fourth"):
            sink.send(payload)
    assert server.join() == [b"second", b"third"]


def _writable(msg: rc.Message) -> None:
    """Asks the message for a writable buffer (it must refuse)."""
    import ctypes

    (ctypes.c_char * len(msg)).from_buffer(msg)


def test_recv_into_copies_into_the_callers_buffer_and_returns_none_at_the_end(serve, opts):
    def into(src: rc.RdmaSrc) -> List[bytes]:
        # any buffer that holds the message will do, as with socket.recv_into
        small = bytearray(8)
        got = []
        n = src.recv_into(small)
        assert n is not None
        got.append(bytes(small[:n]))
        n = src.recv_into(small)
        assert n == 0
        got.append(b"")
        # too small: a clear error naming both sizes, and the message stays to be received
        with pytest.raises(rc.MessageTooLarge) as too_large:
            src.recv_into(small)
        assert (too_large.value.length, too_large.value.max) == (4096, 8)
        assert "4096 bytes" in str(too_large.value) and "8-byte buffer" in str(too_large.value)
        buf = bytearray(src.max_message_size)
        while (n := src.recv_into(buf)) is not None:
            got.append(bytes(buf[:n]))
        return got

    server = serve("src", into)
    with rc.RdmaSink.connect(server.addr, max_msg_size=4096, **opts) as sink:
        for payload in (b"abc", b"", b"x" * 4096):
            sink.send(payload)
    assert server.join() == [b"abc", b"", b"x" * 4096]


def test_end_of_stream_is_none_then_none_again(serve, opts):
    def ends(src: rc.RdmaSrc) -> List[Any]:
        return [src.recv_bytes(), src.recv(), src.recv(), src.recv_bytes()]

    server = serve("src", ends)
    sink = rc.RdmaSink.connect(server.addr, **opts)
    sink.send(b"only")
    assert sink.finish() == 1
    assert sink.closed
    with pytest.raises(rc.Closed):
        sink.send(b"late")
    assert server.join() == [b"only", None, None, None]


def test_peer_loss_raises_peer_lost_with_the_count_of_messages_that_arrived(serve, opts):
    import os
    import subprocess
    import sys

    # The child sends 5 messages, waits until the receiver has them all (a line on its stdin),
    # then vanishes: no finish, no abort.
    child_code = f"""
import os, sys, rdma_container as rc
sink = rc.RdmaSink.connect({{addr!r}}, **{opts!r})
for i in range(5):
    sink.send(b"m")
sys.stdin.readline()
os._exit(0)
"""
    five_arrived = threading.Event()

    def lose(src: rc.RdmaSrc) -> Any:
        got = [src.recv_bytes() for _ in range(5)]
        five_arrived.set()
        with pytest.raises(rc.PeerLost) as lost:
            src.recv_bytes()
        assert isinstance(lost.value, rc.Error)
        return got, lost.value.received

    server = serve("src", lose)
    child = subprocess.Popen(
        [sys.executable, "-c", child_code.replace("{addr!r}", repr(server.addr))],
        stdin=subprocess.PIPE,
        env=dict(os.environ),
    )
    try:
        assert five_arrived.wait(60), "the child's messages did not arrive"
        child.communicate(b"die\n", timeout=60)
    finally:
        child.kill()
    assert child.returncode == 0
    assert server.join() == ([b"m"] * 5, 5)


def test_refused_client_sees_rejected_with_the_servers_reason(serve, opts):
    def refuse(incoming: rc.Incoming) -> str:
        assert incoming.peer_role == "sender"
        assert incoming.peer_addr[0] == "127.0.0.1"
        incoming.refuse("not today")
        with pytest.raises(RuntimeError):
            incoming.accept_src()
        return "refused"

    server = serve("incoming", refuse)
    with pytest.raises(rc.Rejected) as rejected:
        rc.RdmaSink.connect(server.addr, **opts)
    assert rejected.value.reason == "not today"
    assert "not today" in str(rejected.value)
    assert server.join() == "refused"


def test_a_message_larger_than_the_session_carries_raises_and_sends_nothing(serve, opts):
    server = serve("src", collect)
    with rc.RdmaSink.connect(server.addr, max_msg_size=1024, **opts) as sink:
        assert sink.max_message_size == 1024
        with pytest.raises(rc.MessageTooLarge) as too_large:
            sink.send(bytes(1025))
        assert (too_large.value.length, too_large.value.max) == (1025, 1024)
        sink.send(bytes(1024))
    assert server.join() == [bytes(1024)]


def test_an_exception_in_the_sink_block_aborts_and_the_receiver_sees_rejected(serve, opts):
    server = serve("src", rejection_reason)
    with pytest.raises(KeyError):
        with rc.RdmaSink.connect(server.addr, **opts) as sink:
            sink.send(b"one")
            raise KeyError("boom")
    assert "exception" in server.join()


def test_duplex_carries_both_directions_between_the_same_two_ends(serve, opts):
    def echo(pair: Any) -> int:
        sink, src = pair
        n = 0
        for msg in src:
            with msg:
                sink.send(bytes(msg)[::-1])
            n += 1
        return sink.finish()

    server = serve("duplex", echo)
    sink, src = rc.duplex_connect(server.addr, **opts)
    for word in (b"ping", b"abc", b""):
        sink.send(word)
        assert src.recv_bytes() == word[::-1]
    sink.finish()
    assert src.recv() is None
    assert server.join() == 3


def test_send_in_place_fills_the_registered_slot(serve, opts):
    server = serve("src", collect)
    with rc.RdmaSink.connect(server.addr, **opts) as sink:
        sink.send_in_place(5, lambda slot: memoryview(slot).__setitem__(slice(None), b"hello"))
        kept: List[Any] = []
        sink.send_in_place(3, lambda slot: kept.append(slot) or memoryview(slot).__setitem__(slice(None), b"abc"))
        with pytest.raises(BufferError):
            memoryview(kept[0])  # the slot was lent for the call only
    assert server.join() == [b"hello", b"abc"]


def test_a_failing_fill_function_aborts_the_session(serve, opts):
    server = serve("src", rejection_reason)
    sink = rc.RdmaSink.connect(server.addr, **opts)

    def fail(slot: Any) -> None:
        raise ValueError("cannot encode")

    with pytest.raises(ValueError):
        sink.send_in_place(4, fail)
    assert sink.closed
    assert "fill" in server.join()


def test_session_info_is_read_only_and_says_what_runs(serve, opts):
    server = serve("sink", lambda sink: sink.finish())
    src = rc.RdmaSrc.connect(server.addr, credits=4, max_msg_size=65536, **opts)
    info = src.info
    assert info.transport == opts["transport"]
    assert info.credits == 4  # the receiver's slots are the window
    assert info.max_message_size == 65536  # the smaller of both ends' limits
    assert info.peer == "127.0.0.1"
    assert "credits 4" in info.description
    with pytest.raises(AttributeError):
        info.credits = 8  # type: ignore[misc]
    assert src.recv() is None
    assert server.join() == 0


def test_a_session_striped_over_three_queue_pairs_delivers_in_order(serve, opts):
    # The client chooses qps (the listener takes it): one stream over three queue pairs (tcp:
    # data connections), messages of many lengths, in order.
    def echo(src: Any) -> List[bytes]:
        return [bytes(m) for m in iter(src.recv, None)]

    server = serve("src", echo)
    sink = rc.RdmaSink.connect(server.addr, qps=3, credits=4, **opts)
    assert sink.info.qps == 3
    assert "qps 3" in sink.info.description
    sent = [b"%d" % i * (i % 50 + 1) for i in range(500)]
    for m in sent:
        sink.send(m)
    sink.finish()
    assert server.join() == sent
    with pytest.raises(rc.InvalidConfig):
        rc.RdmaSink.connect("127.0.0.1:1", qps=17)


def test_a_session_over_two_paths_names_the_second_and_delivers_in_order(serve, opts):
    # paths: the server's other addresses (127.0.0.2 is this host's too), one path each; the
    # four queue pairs take the two paths in turn.
    if "device" in opts:
        pytest.skip("--paths chooses each path's device; this fixture names one (DOCA: tests/netns.rs)")

    def echo(src: Any) -> List[bytes]:
        return [bytes(m) for m in iter(src.recv, None)]

    server = serve("src", echo)
    sink = rc.RdmaSink.connect(server.addr, qps=4, paths=["127.0.0.2"], **opts)
    assert "path 1 source " in sink.info.description
    assert "-> peer 127.0.0.2" in sink.info.description
    sent = [b"%d" % i * (i % 7 + 1) for i in range(300)]
    for m in sent:
        sink.send(m)
    sink.finish()
    assert server.join() == sent
    assert (sink.paths_lost, sink.paths_rebuilt) == (0, 0), "no path failed"
    # Four queue pairs over two paths: each path carried two lanes' messages.
    assert len(sink.path_bytes) == 2 and sum(sink.path_bytes) == sum(map(len, sent))
    assert all(b > 0 for b in sink.path_bytes), sink.path_bytes
    with pytest.raises(ValueError):
        rc.RdmaSink.connect("127.0.0.1:1", qps=2, paths=["not-an-address"])
    with pytest.raises(rc.InvalidConfig):
        # Two paths need at least two queue pairs.
        rc.RdmaSink.connect("127.0.0.1:1", paths=["127.0.0.2", "127.0.0.3"], qps=1)


def test_unknown_options_and_bad_values_are_refused_before_connecting():
    with pytest.raises(TypeError):
        rc.RdmaSink.connect("127.0.0.1:1", colour="blue")  # type: ignore[call-arg]
    with pytest.raises(rc.InvalidConfig):
        rc.RdmaSink.connect("127.0.0.1:1", credits=0)
    with pytest.raises(ValueError):
        rc.RdmaSink.connect("127.0.0.1:1", transport="carrier-pigeon")
    with pytest.raises(ValueError):
        rc.RdmaSink.connect("127.0.0.1:1", connect_timeout=-1.0)


def test_queue_pair_settings_and_require_rdma_reach_the_library_checks():
    # Out of range: refused before connecting, naming the setting.
    for name, value in (("traffic_class", 256), ("service_level", 16), ("mtu", 1000),
                        ("ack_timeout", 32), ("retry_count", 8)):
        with pytest.raises((rc.InvalidConfig, OverflowError, ValueError)):
            rc.RdmaSink.connect("127.0.0.1:1", **{name: value})
    # In range but on tcp, which has no queue pair: refused, not ignored.
    with pytest.raises(rc.InvalidConfig, match="apply to an RDMA queue pair"):
        rc.RdmaSrc.connect("127.0.0.1:1", transport="tcp", traffic_class=104, mtu=4096)
    # Accepted: the session then fails only for want of a listener.
    with pytest.raises(rc.ConnectionFailed):
        rc.RdmaSrc.connect("127.0.0.1:1", require_rdma=True, service_level=3, connect_timeout=0.3)


def test_connecting_to_nothing_fails_with_connection_failed_after_the_timeout():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens here once closed
    with pytest.raises(rc.ConnectionFailed):
        rc.RdmaSrc.connect(("127.0.0.1", port), connect_timeout=0.3)


def test_doctor_reports_what_the_command_line_reports():
    report = rc.doctor(peer="127.0.0.1")
    for key in ("version", "transports", "table", "path", "choice", "problems", "auto_transport"):
        assert key in report
    assert "tcp" in report["transports"]
    assert report["path"]["source"] == "127.0.0.1"
    assert set(rc.compiled_in_transports()) == set(report["transports"])


def test_without_rdma_core_the_module_runs_tcp_and_doctor_says_why_verbs_cannot(tmp_path):
    import os
    import subprocess
    import sys

    # VERBS_SYS_LIBIBVERBS names the file the verbs layer dlopens: a missing one plays a host
    # without rdma-core (the module links nothing from it).
    code = """
import threading, rdma_container as rc
report = rc.doctor(peer="127.0.0.1", sysfs_root=%r)
assert "verbs" in report["transports"], report
assert any("verbs transport cannot run here" in p and "libibverbs" in p for p in report["problems"]), report
assert report["choice"] is None and report["auto_transport"] == "tcp", report
with rc.Listener("127.0.0.1:0", transport="tcp", handshake_timeout=10.0) as listener:
    try:
        rc.RdmaSink.connect(listener.local_addr, transport="verbs", sysfs_root=%r, connect_timeout=10.0)
        raise SystemExit("verbs connected without rdma-core")
    except (rc.TransportUnavailable, rc.NoRoceDevice) as e:
        print(type(e).__name__, e)
    got = []
    # A tcp session on the same host works.
    def serve():
        src = listener.accept(timeout=30).accept_src()
        while (data := src.recv_bytes()) is not None:
            got.append(data)
    t = threading.Thread(target=serve)
    t.start()
    with rc.RdmaSink.connect(listener.local_addr, transport="auto", connect_timeout=10.0) as sink:
        assert sink.info.transport == "tcp"
        sink.send(b"over tcp")
    t.join(30)
    print(got)
""" % (str(tmp_path), str(tmp_path))
    env = dict(os.environ, VERBS_SYS_LIBIBVERBS="/nonexistent/libibverbs.so.1")
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert child.returncode == 0, child.stderr
    assert "[b'over tcp']" in child.stdout


def test_threads_use_sessions_at_once_with_the_gil_released(serve, opts):
    # Two sessions, each driven by its own thread, interleave: a blocking recv in one thread
    # must not stop the other thread's sends.
    results: Dict[str, Any] = {}
    server = serve("src", collect)
    sink = rc.RdmaSink.connect(server.addr, **opts)

    def sender() -> None:
        for i in range(2000):
            sink.send(b"%d" % i)
        results["sent"] = sink.finish()

    t = threading.Thread(target=sender)
    t.start()
    t.join(60)
    assert not t.is_alive()
    assert results["sent"] == 2000
    assert len(server.join()) == 2000


def test_a_fill_function_that_keeps_a_view_of_the_slot_raises_and_aborts(serve, opts):
    server = serve("src", rejection_reason)
    sink = rc.RdmaSink.connect(server.addr, **opts)
    views: List[memoryview] = []
    with pytest.raises(BufferError):
        sink.send_in_place(4, lambda slot: views.append(memoryview(slot)))
    assert sink.closed
    assert len(views[0]) == 4  # still readable memory: the slot is never freed
    assert "view of its send slot" in server.join()


def test_a_shared_key_authenticates_and_another_key_is_refused(opts, tmp_path):
    def key_file(name: str, text: str) -> str:
        path = tmp_path / name
        path.write_text(text + "\n")
        path.chmod(0o600)
        return str(path)

    key = key_file("key", "a-pre-shared-key-of-enough-length")
    other = key_file("other", "another-key-of-enough-length-too")
    server = Server({**opts, "auth_key_file": key}, "src", collect)
    with rc.RdmaSink.connect(server.addr, **{**opts, "auth_key_file": key}) as sink:
        sink.send(b"hello")
        assert sink.finish() == 1
    assert server.join() == [b"hello"]

    listener = rc.Listener("127.0.0.1:0", **{**opts, "auth_key_file": key})
    with pytest.raises(rc.Error) as refused:
        rc.RdmaSink.connect(listener.local_addr, **{**opts, "auth_key_file": other})
    assert "authentication failed" in str(refused.value)


def test_a_checksum_on_both_ends_delivers_every_message_and_on_one_end_is_refused(opts):
    payloads = [bytes([i % 256]) * (i * 7) for i in range(50)]
    server = Server({**opts, "checksum": "crc32c"}, "src", collect)
    with rc.RdmaSink.connect(server.addr, **{**opts, "checksum": "crc32c"}) as sink:
        for p in payloads:
            sink.send(p)
        assert sink.finish() == len(payloads)
    assert server.join() == payloads

    unchecked = Server(opts, "src", collect)
    with pytest.raises(rc.Error) as refused:
        rc.RdmaSink.connect(unchecked.addr, **{**opts, "checksum": "crc32c"})
    assert "checksum mismatch" in str(refused.value)
    with pytest.raises(rc.Error) as refused_here:
        unchecked.join()
    assert "checksum mismatch" in str(refused_here.value)
    with pytest.raises(ValueError):
        rc.RdmaSink.connect(server.addr, **{**opts, "checksum": "md5"})


def test_resumption_is_negotiated_counted_and_can_be_turned_off(opts):
    payloads = [b"%d" % i for i in range(100)]
    server = Server({**opts, "resume_timeout": 5.0}, "src", collect)
    with rc.RdmaSink.connect(server.addr, **opts) as sink:
        assert "resume 5.0 s" in sink.info.description, "the shorter timeout wins"
        for p in payloads:
            sink.send(p)
        assert sink.finish() == len(payloads)
        assert (sink.resumes, sink.messages_resent) == (0, 0), "readable after finish"
    assert server.join() == payloads

    off = Server({**opts, "resume_timeout": 0}, "src", collect)
    with rc.RdmaSink.connect(off.addr, **opts) as sink:
        assert "resume off" in sink.info.description
        sink.send(b"x")
        sink.finish()
    assert off.join() == [b"x"]
    with pytest.raises(ValueError):
        rc.RdmaSink.connect(server.addr, **{**opts, "resume_timeout": -1.0})
