"""``neuronx_distributed.modules.qkv_linear.GQAQKVColumnParallelLinear``: the query, key and
value projections as one column-parallel layer (docs/run-your-script.md §NxD trainer).

Each rank holds its heads' slices of the three weights — ``[q/tp; kv/tp; kv/tp]`` rows of one
fused parameter ``weight`` — each slice cut from the full FP32 Q, K or V block initialised with
the same RNG on every rank, as NxD's CPU initialisation does; ``forward`` returns ``(q, k, v)``,
the sequence gathered first under sequence parallelism. Replicating key/value heads over ranks
(``kv_size_multiplier > 1``) is not emulated; ``fuse_qkv`` is accepted and changes nothing here
(NxD names the parameters ``weight_qkv`` or ``weight_q/k/v``; this layer's is ``weight`` either way,
so a checkpoint written by real NxD does not load into it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from emulator.compat.gaps import NotEmulatedError
from emulator.compat.nxd_layers import ColumnParallelLinear
from emulator.parallel import mappings as tp
from emulator.parallel.partition import divide

_NAME = "neuronx_distributed.modules.qkv_linear.GQAQKVColumnParallelLinear"


class GQAQKVColumnParallelLinear(ColumnParallelLinear):
    def __init__(
        self,
        input_size: int,
        output_sizes: list[int],
        bias: bool = True,
        gather_output: bool = True,
        dtype: torch.dtype = torch.float32,
        device: Any = None,
        init_method: Callable[[torch.Tensor], Any] | None = None,
        sequence_parallel_enabled: bool = False,
        keep_master_weight: bool = False,
        kv_size_multiplier: int = 1,
        fuse_qkv: bool = True,
        reduce_dtype: torch.dtype = torch.float32,
    ) -> None:
        if kv_size_multiplier != 1:
            raise NotEmulatedError(f"{_NAME}(kv_size_multiplier={kv_size_multiplier})", "replicated key/value heads")
        if gather_output:
            raise NotEmulatedError(f"{_NAME}(gather_output=True)")
        q_size, kv_size = output_sizes
        self.q_size, self.kv_size = q_size, kv_size
        self.fuse_qkv = fuse_qkv
        super().__init__(
            input_size,
            q_size + 2 * kv_size,
            bias=bias,
            gather_output=False,
            dtype=dtype,
            device=device,
            init_method=init_method,
            sequence_parallel_enabled=sequence_parallel_enabled,
        )
        self._zero_bias()

    def _zero_bias(self) -> None:
        if self.bias is not None:
            with torch.no_grad():
                self.bias.zero_()

    def _blocks(self, output_size: int, stride: int) -> tuple[int, ...]:
        """Q, K and V: three weights of their own sizes, each split over the ranks."""
        return (self.q_size, self.kv_size, self.kv_size)

    def _shard_sizes(self) -> tuple[int, int]:
        size = tp.tp_size()
        return divide(self.q_size, size), divide(self.kv_size, size)

    def initialize_weight_biases(self) -> None:
        """The fused shard initialised again (``[Wq; Wk; Wv]`` rows of this rank), the bias zeroed."""
        self.init_weight_cpu()
        self._zero_bias()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out = super().forward(x)
        if isinstance(out, tuple):
            out = out[0]
        q, kv = self._shard_sizes()
        query, key, value = out.split([q, kv, kv], dim=-1)
        return query, key, value
