"""Where a cluster's files live: all in the runtime directory of the single daemon
(``$XDG_RUNTIME_DIR``, else ``/tmp/neuron-emulator-<uid>``; docs/security.md).

| file | what |
|---|---|
| ``neuron-emulator-cluster.json`` | the state file: host PID, nodes, addresses, ports (0600) |
| ``neuron-emulator-cluster.lock`` | held (``flock``) by the host while it runs: one cluster per user |
| ``neuron-emulator-cluster.log`` | the host's log with ``cluster up --detach`` (0600) |
| ``neuron-emulator-cluster/`` | 0700: ``node-<i>.sock`` (daemons), ``control.sock`` (the host's), ``file_sd.json`` |
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from neurontools.sources.address import runtime_dir

BASENAME = "neuron-emulator-cluster"
FILE_SD_NAME = "file_sd.json"
CONTROL_NAME = "control.sock"


@dataclass(frozen=True)
class Layout:
    """The paths of one runtime directory's cluster."""

    directory: str  # the runtime directory

    @classmethod
    def default(cls) -> Layout:
        return cls(runtime_dir())

    @property
    def state_file(self) -> str:
        return os.path.join(self.directory, f"{BASENAME}.json")

    @property
    def lock_file(self) -> str:
        return os.path.join(self.directory, f"{BASENAME}.lock")

    @property
    def log_file(self) -> str:
        return os.path.join(self.directory, f"{BASENAME}.log")

    @property
    def node_dir(self) -> str:
        return os.path.join(self.directory, BASENAME)

    @property
    def file_sd(self) -> str:
        """The default Prometheus target file (``cluster up --file-sd PATH`` writes it elsewhere)."""
        return os.path.join(self.node_dir, FILE_SD_NAME)

    @property
    def control_socket(self) -> str:
        """The host's control socket: takes a node down (``fault node-down``) and up again."""
        return os.path.join(self.node_dir, CONTROL_NAME)

    def node_socket(self, index: int) -> str:
        return os.path.join(self.node_dir, f"node-{index}.sock")
