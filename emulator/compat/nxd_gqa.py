"""``neuronx_distributed.modules.qkv_linear.GQAQKVColumnParallelLinear``: the query, key and
value projections as one column-parallel layer (docs/run-your-script.md §NxD trainer).

Each rank holds its heads' slices of the three weights — ``[q/tp; kv/tp; kv/tp]`` rows of the
fused weight (``weight_qkv``) — each slice cut from a full FP32 weight initialised with the same
RNG on every rank, as NxD's CPU initialisation does; ``forward`` returns ``(q, k, v)``, the
sequence gathered first under sequence parallelism. Replicating key/value heads over ranks
(``kv_size_multiplier > 1``) is not emulated; ``fuse_qkv`` changes only the parameter names
NxD uses (here one fused weight either way).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from emulator.compat.gaps import NotEmulatedError
from emulator.compat.nxd_layers import ColumnParallelLinear, CpuMasterInit, _default_linear_init
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
        self._qkv_init = CpuMasterInit(init_method or _default_linear_init, dtype, device)
        self.initialize_weight_biases()

    def _shard_sizes(self) -> tuple[int, int]:
        size = tp.tp_size()
        return divide(self.q_size, size), divide(self.kv_size, size)

    def initialize_weight_biases(self) -> None:
        """The fused shard, ``[Wq; Wk; Wv]`` rows of this rank, from three full weights."""
        parts = [
            self._qkv_init.weight((size, self.weight.shape[1]), 0) for size in (self.q_size, self.kv_size, self.kv_size)
        ]
        with torch.no_grad():
            self.weight.copy_(torch.cat([p.detach() for p in parts]).to(self.weight.device, self.weight.dtype))
            if self.bias is not None:
                self.bias.zero_()

    def init_weight_cpu(self) -> None:
        self.initialize_weight_biases()

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        out = super().forward(x)
        if isinstance(out, tuple):
            out = out[0]
        q, kv = self._shard_sizes()
        query, key, value = out.split([q, kv, kv], dim=-1)
        return query, key, value
