"""Serving neuron-exporter's app (``app.py``) with uvicorn on a socket bound beforehand, so that a
port that cannot be had is one clear line before anything starts (``cli.py``)."""

from __future__ import annotations

import contextlib
import signal
import socket
import threading
from collections.abc import Generator

import uvicorn
from fastapi import FastAPI


class QuietServer(uvicorn.Server):
    """uvicorn's server without re-raising the caught SIGINT/SIGTERM after shutdown (exit 0)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


def listen(bind: str, port: int) -> socket.socket:
    """A listening TCP socket on ``bind:port``; OSError says why it cannot be had."""
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((bind, port))
        sock.listen(128)
        sock.set_inheritable(True)
    except OSError:
        sock.close()
        raise
    return sock


def url(sock: socket.socket) -> str:
    """``http://HOST:PORT`` of a listening socket (IPv6 hosts in brackets)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def serve(app: FastAPI, sock: socket.socket) -> None:
    """Serve ``app`` on ``sock`` until SIGINT/SIGTERM (the app's lifespan runs its collector), then close it."""
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on", timeout_graceful_shutdown=2)
    try:
        QuietServer(config).run(sockets=[sock])
    finally:
        sock.close()
