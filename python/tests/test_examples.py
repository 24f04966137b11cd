"""The examples run as documented, on loopback (the file push is in test_rdma_dropin.py)."""

import subprocess
import sys
from pathlib import Path

from conftest import JOIN_TIMEOUT

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_send_recv_example_runs_both_ends_over_loopback():
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "send_recv.py"), "--count", "10000"],
        capture_output=True,
        text=True,
        timeout=JOIN_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    assert "sent 10000, received 10000 messages over 127.0.0.1" in result.stdout


def test_asyncio_example_runs_both_ends_on_one_event_loop():
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "asyncio_pair.py"), "--count", "10000"],
        capture_output=True,
        text=True,
        timeout=JOIN_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    assert "sent 10000, received 10000 messages over 127.0.0.1 on one event loop" in result.stdout
