"""uvicorn in a background thread with its own event loop (the engine keeps the main thread).

The socket is bound here first, so `port 0` resolves to a real port before the ready line.  Each connection is
uvicorn's httptools protocol with header and read-time bounds (connection.py).
"""
from __future__ import annotations

import asyncio
import functools
import ipaddress
import socket
import threading
import time
from typing import Any

import uvicorn

from dcpctl.runtime.server.connection import ConnectionLimits, GuardedHttpTools

START_TIMEOUT_S = 30.0


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _runner() -> Any:
    try:
        import uvloop
    except ImportError:
        return asyncio.run
    return uvloop.run


class HttpServer:
    """`reuse_port`: several processes listen on one port and the kernel spreads connections over them."""

    def __init__(self, app: Any, host: str, port: int, reuse_port: bool = False,
                 limits: ConnectionLimits = ConnectionLimits()) -> None:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.bind((host, port))
        self.sock.listen(2048)
        self.host, self.port = host, self.sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off",
                                timeout_graceful_shutdown=2,
                                http=functools.partial(GuardedHttpTools, limits=limits))
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self._run, name="dcpctl-http", daemon=True)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def _run(self) -> None:
        # uvloop when installed (a pyproject dependency off Windows), as uvicorn's own run() picks it, and
        # httptools (connection.py): per streamed token both cost a fraction of the pure-Python asyncio loop
        # and h11
        _runner()(self.server.serve(sockets=[self.sock]))

    def start(self) -> "HttpServer":
        self.thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the HTTP server did not start on {self.url}")
            time.sleep(0.01)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        self.sock.close()
