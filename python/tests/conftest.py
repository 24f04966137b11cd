"""Shared helpers: the transport under test and a one-client server thread.

RDMA_TEST_TRANSPORT selects the transport, as for the Rust tests: tcp (the default here) or
doca (the module must be built with the doca-sim feature: the DOCA simulator, on a fake sysfs
that describes its device mlx5_0). Every wait is bounded: sessions get connect, handshake and
idle timeouts, and server threads are joined with a timeout.
"""

import os
import threading
from pathlib import Path
from typing import Any, Callable, Dict, Optional

import pytest

import rdma_container as rc

TRANSPORT = os.environ.get("RDMA_TEST_TRANSPORT", "tcp")
#: Longest any test waits for a thread or a child process.
JOIN_TIMEOUT = 60.0


def _doca_sim_sysfs(root: Path) -> Path:
    """A sysfs with the simulator's device mlx5_0, port 1 active, one RoCE v2 GID."""
    port = root / "class/infiniband/mlx5_0/ports/1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (port / sub).mkdir(parents=True, exist_ok=True)
    (port / "state").write_text("4: ACTIVE\n")
    (port / "link_layer").write_text("Ethernet\n")
    (port / "gids/1").write_text("0000:0000:0000:0000:0000:ffff:0a00:0001\n")
    (port / "gid_attrs/types/1").write_text("RoCE v2\n")
    (port / "gid_attrs/ndevs/1").write_text("eth9\n")
    return root


@pytest.fixture(scope="session")
def opts(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Any]:
    """Keyword arguments for every session in the tests."""
    base: Dict[str, Any] = {
        "transport": TRANSPORT,
        "connect_timeout": 10.0,
        "handshake_timeout": 10.0,
        "idle_timeout": 30.0,
    }
    if TRANSPORT == "doca":
        if "doca" not in rc.compiled_in_transports():
            pytest.fail("RDMA_TEST_TRANSPORT=doca needs the module built with --features doca-sim")
        root = _doca_sim_sysfs(tmp_path_factory.mktemp("sysfs"))
        base.update(device="mlx5_0", sysfs_root=str(root))
    return base


class Server:
    """A listener on 127.0.0.1 and a thread that takes one client and runs ``body`` on it.

    ``role`` is "src" (accept_src), "sink" (accept_sink), "duplex" (accept_duplex) or
    "incoming" (the Incoming itself)."""

    def __init__(self, opts: Dict[str, Any], role: str, body: Callable[[Any], Any]) -> None:
        self.listener = rc.Listener("127.0.0.1:0", **opts)
        self.addr = self.listener.local_addr
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self.thread = threading.Thread(target=self._run, args=(role, body), daemon=True)
        self.thread.start()

    def _run(self, role: str, body: Callable[[Any], Any]) -> None:
        try:
            if role == "duplex":
                session: Any = self.listener.accept_duplex()
            else:
                incoming = self.listener.accept(timeout=JOIN_TIMEOUT)
                if incoming is None:
                    raise TimeoutError("no client arrived")
                session = {
                    "src": incoming.accept_src,
                    "sink": incoming.accept_sink,
                    "incoming": lambda: incoming,
                }[role]()
            self.result = body(session)
        except BaseException as e:  # handed to the test by join()
            self.error = e

    def join(self) -> Any:
        self.thread.join(JOIN_TIMEOUT)
        alive = self.thread.is_alive()
        self.listener.close()
        assert not alive, "the server thread did not finish"
        if self.error is not None:
            raise self.error
        return self.result


@pytest.fixture
def serve(opts: Dict[str, Any]) -> Callable[..., Server]:
    """``serve(role, body)``: a Server with the test options."""
    return lambda role, body: Server(opts, role, body)
