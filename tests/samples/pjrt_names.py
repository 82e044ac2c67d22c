"""torch_xla 2.0's PJRT names, as the samples use them on that version: ``pjrt://`` init and
``torch_xla.experimental.pjrt``'s ordinals.

    torchrun --nproc_per_node=2 pjrt_names.py
"""

import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm
import torch_xla.experimental.pjrt as pjrt
import torch_xla.experimental.pjrt_backend  # noqa: F401  (registers the pjrt:// init method)

dist.init_process_group("xla", init_method="pjrt://")
total = xm.all_reduce(xm.REDUCE_SUM, torch.ones(2, device=xm.xla_device()))
where = f"rank {pjrt.global_ordinal()} of {pjrt.world_size()}"
print(f"{where} pjrt {pjrt.using_pjrt()} {pjrt.device_type()} sum {total.tolist()}")
