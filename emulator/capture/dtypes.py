"""The training dtypes by the names the workloads take (``--dtype fp32|bf16|fp16``), as torch dtypes."""

from __future__ import annotations

from collections.abc import Mapping

import torch

TORCH_DTYPES: Mapping[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
