"""The read side of a daemon client: all a snapshot or an inventory is fetched through.

``neurontools.sources.daemon_client.DaemonClient`` is one; tests use fakes. Standard library only,
so a client that imports it (every training process) stays light.
"""

from __future__ import annotations

from typing import Any, Protocol


class DaemonReader(Protocol):
    def get(self, path: str) -> Any: ...
