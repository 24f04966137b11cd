"""Ctrl-C (SIGINT) while a call blocks with the GIL released: KeyboardInterrupt, promptly, and
the session aborted so that the peer sees it."""

import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Dict, List

import pytest

import rdma_container as rc

from conftest import JOIN_TIMEOUT

#: A generous bound on "promptly" (the module checks every 100 ms): a liveness check that a
#: blocked call ends at all, not a performance figure.
PROMPTLY = 3.0


def start_child(code: str) -> "subprocess.Popen[str]":
    return subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )


def read_line(child: "subprocess.Popen[str]", timeout: float = JOIN_TIMEOUT) -> str:
    """The child's next stdout line, waiting at most ``timeout``."""
    line: List[str] = []
    reader = threading.Thread(target=lambda: line.append(child.stdout.readline()), daemon=True)  # type: ignore[union-attr]
    reader.start()
    reader.join(timeout)
    if not line:
        child.kill()
        pytest.fail(f"the child printed nothing within {timeout} s")
    return line[0].strip()


def interrupt_and_time(child: "subprocess.Popen[str]") -> float:
    time.sleep(0.3)  # let it settle into the blocking call
    started = time.monotonic()
    child.send_signal(signal.SIGINT)
    try:
        child.wait(JOIN_TIMEOUT)
    except subprocess.TimeoutExpired:
        child.kill()
        pytest.fail("the child did not end after SIGINT")
    return time.monotonic() - started


def interrupt_expecting(child: "subprocess.Popen[str]", line: str, unblock: threading.Event) -> None:
    """Waits for the child to block, sends SIGINT, lets the server go on, and checks that the
    child caught KeyboardInterrupt (exit 3, ``line`` printed) promptly."""
    assert read_line(child) == "blocking"
    took = interrupt_and_time(child)
    unblock.set()
    out, err = child.communicate(timeout=JOIN_TIMEOUT)
    assert child.returncode == 3, (out, err)
    assert line in out
    assert took < PROMPTLY, f"SIGINT took {took:.2f} s to end the call"


def test_ctrl_c_in_a_blocking_recv_raises_keyboard_interrupt_and_aborts_the_session(serve, opts):
    interrupted = threading.Event()

    def sender(sink: rc.RdmaSink) -> str:
        sink.send(b"ready")
        assert interrupted.wait(JOIN_TIMEOUT)
        with pytest.raises(rc.Rejected) as rejected:
            for _ in range(10):  # the credits run out, then the receiver's Reject is read
                sink.send(b"more")
        return rejected.value.reason

    server = serve("sink", sender)
    child = start_child(
        f"""
import sys, rdma_container as rc
src = rc.RdmaSrc.connect({server.addr!r}, **{opts!r})
assert src.recv_bytes() == b"ready"
print("blocking", flush=True)
try:
    src.recv()
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
    sys.exit(3)
print("recv returned", flush=True)
"""
    )
    interrupt_expecting(child, "KeyboardInterrupt", interrupted)
    assert "interrupted" in server.join()


def test_ctrl_c_in_a_blocking_send_and_in_accept_raises_keyboard_interrupt(serve, opts):
    # A receiver that never reads: the child's sends block once its credits are spent.
    release = threading.Event()

    def stall(src: rc.RdmaSrc) -> Any:
        release.wait(JOIN_TIMEOUT)
        with pytest.raises(rc.Rejected) as rejected:
            while src.recv_bytes() is not None:
                pass
        return rejected.value.reason

    server = serve("src", stall)
    child = start_child(
        f"""
import sys, rdma_container as rc
sink = rc.RdmaSink.connect({server.addr!r}, **{opts!r})
print("blocking", flush=True)
try:
    while True:
        sink.send(b"x")
except KeyboardInterrupt:
    print("KeyboardInterrupt", sink.closed, flush=True)
    sys.exit(3)
"""
    )
    interrupt_expecting(child, "KeyboardInterrupt True", release)
    assert "interrupted" in server.join()

    child = start_child(
        """
import sys, rdma_container as rc
listener = rc.Listener("127.0.0.1:0")
print("blocking", flush=True)
try:
    listener.accept()
except KeyboardInterrupt:
    sys.exit(3)
"""
    )
    assert read_line(child) == "blocking"
    took = interrupt_and_time(child)
    assert child.returncode == 3
    assert took < PROMPTLY


def test_ctrl_c_while_the_server_has_not_accepted_yet_raises_keyboard_interrupt():
    # The client's hello waits in a listener that never accepts: the handshake wait (up to
    # handshake_timeout) must see Ctrl-C too. This is the drop-in's client waiting for the
    # server to create its object.
    with rc.Listener("127.0.0.1:0", transport="tcp") as listener:
        child = start_child(
            f"""
import sys, rdma_container as rc
print("blocking", flush=True)
try:
    rc.RdmaSrc.connect({listener.local_addr!r}, transport="tcp", handshake_timeout=60.0)
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
    sys.exit(3)
"""
        )
        interrupt_expecting(child, "KeyboardInterrupt", threading.Event())
