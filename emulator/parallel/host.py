"""The host's share of every execution: the time a NeuronCore waits for its host between graphs.

On a Trn1 the training process traces each step's graph in torch_xla (Python model code plus
the lazy-tensor IR for every op), looks the graph up in the compile cache, moves the inputs and
launches the NEFF; while it does, the NeuronCore idles. That host share is what keeps the
utilisation neuron-top shows below 100 % on a healthy job: the Neuron BERT tutorial reports
"around 80 %" for BERT-Large phase 1 with DP32 (docs/parallel.md, "Host share").

Model: ``host seconds = HOST_SECONDS_PER_DEVICE_OP x device ops of the graph`` (tracing is linear
in the ops traced; the launch and input transfer are small next to it at these op counts).

``HOST_SECONDS_PER_DEVICE_OP`` is **fitted**, on one published figure only: the BERT-Large Ph1
DP32 calibration row's utilisation of 80 %. ``fit_host_seconds_per_op`` reproduces the fit from a
planned job; ``tests/test_parallel_job.py`` checks the constant still gives 80 % on that row.
The emulator's own Python cost never enters: it is a modelled time the replaying ranks wait.
"""

from __future__ import annotations

from typing import Protocol

# Fitted on the BERT-L Ph1 DP32 row (80 % NeuronCore utilisation); see fit_host_seconds_per_op.
HOST_SECONDS_PER_DEVICE_OP = 19.50e-6
PUBLISHED_BERT_UTILIZATION = 0.80  # Neuron BERT tutorial, neuron-top during Ph1 DP32 (docs/parallel.md)


class _Graph(Protocol):
    @property
    def device_ops(self) -> int: ...


def host_seconds(graph: _Graph, per_op: float = HOST_SECONDS_PER_DEVICE_OP) -> float:
    return per_op * graph.device_ops


def fit_host_seconds_per_op(device_seconds: float, device_ops: int, utilization: float) -> float:
    """The per-op host time that makes a step of ``device_seconds`` over ``device_ops`` show
    ``utilization``: ``device / (device + h * ops) = utilization``."""
    if not 0 < utilization <= 1 or device_ops <= 0:
        raise ValueError("utilization must be in (0, 1] and device_ops positive")
    return device_seconds * (1 / utilization - 1) / device_ops
