"""What a cluster host that is gone may have left behind, removed (``cluster down``, docs/cluster.md)."""

from __future__ import annotations

import contextlib
import fcntl
import os

from emulator.cluster.layout import Layout
from emulator.cluster.state import ClusterState, remove_files


def remove_leftovers(state: ClusterState, layout: Layout) -> None:
    """What a host that is gone may have left: state, target file, node sockets and their locks."""
    remove_files(state, layout)
    for node in state.nodes:
        if node.address.startswith(layout.node_dir + os.sep):
            for path in (node.address, node.address + ".lock"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)
    for path in (layout.control_socket, layout.control_socket + ".lock"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
    with contextlib.suppress(OSError):
        os.rmdir(layout.node_dir)
    _remove_free_lock(layout)


def _remove_free_lock(layout: Layout) -> None:
    """The cluster lock file, unless a host (starting or running) holds it."""
    try:
        fd = os.open(layout.lock_file, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return
    with contextlib.suppress(OSError):
        os.unlink(layout.lock_file)
    os.close(fd)
