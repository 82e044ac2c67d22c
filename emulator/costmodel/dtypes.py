"""Data types on a NeuronCore-v2: compiler auto-cast, stochastic rounding, bytes on the device.

Facts (docs/reference/trn1-runtime.md §Data types and BF16 switches; [A14], [A15], [A4]):

- TensorE runs BF16 / FP16 / TF32 / cFP8 inputs at 95 TFLOPS per NC and FP32 inputs at a quarter
  of that; FP8 is not faster than BF16 on Trainium1. Integer matmuls execute in FP32.
- VectorE / ScalarE compute in FP32 with free input/output casts: their throughput (elements per
  cycle) does not depend on the dtype; only the bytes they stream from HBM do.
- ``--auto-cast none|matmult|all`` with ``--auto-cast-type bf16|fp16|tf32|fp8_e4m3``: ``matmult``
  casts FP32 matmul inputs inside the core (the FP32 tensors stay FP32 in HBM); ``all`` casts every
  FP32 tensor, so HBM bytes shrink too (tf32 keeps 4-byte storage). Default: ``none`` / ``bf16``
  (current docs; SDK 2.3 defaulted to ``matmult``).
- INT64 is always narrowed to INT32 on Trn1; there is no FP64 hardware (we count FP64 as FP32, or
  as the auto-cast type under ``all``).
- Stochastic rounding (``NEURON_RT_STOCHASTIC_ROUNDING_EN``) changes how FP32 results are
  rounded to 16/8-bit types, not how fast anything runs: it costs nothing here. The published
  "up to 30 % faster" comes from running BF16 at all (which SR makes accurate enough), so it is
  recorded in :class:`CostOptions` for reporting only.
- ``XLA_USE_BF16=1`` maps float/double tensors to BF16 in the framework and turns SR on;
  ``XLA_DOWNCAST_BF16=1`` maps float to BF16 (double to FP32), SR on. Both mean: every FP32 tensor
  is BF16 on the device, i.e. auto-cast ``all`` / ``bf16``.
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping
from dataclasses import dataclass

from emulator.capture.ops import TensorMeta
from emulator.costmodel.sdk import NEWEST, era_of

AUTO_CAST_MODES: tuple[str, ...] = ("none", "matmult", "all")
AUTO_CAST_TYPES: tuple[str, ...] = ("bf16", "fp16", "tf32", "fp8_e4m3")

# bytes per element of a tensor held in a cast type ("tf32" is stored in 4 bytes)
_CAST_ITEMSIZE: Mapping[str, int] = {"bf16": 2, "fp16": 2, "tf32": 4, "fp8_e4m3": 1}

# dtype names as the capture layer writes them (torch names without "torch.")
_FLOAT32 = frozenset({"float32", "float", "float64", "double"})
_NARROWED: Mapping[str, int] = {"int64": 4, "long": 4, "uint64": 4, "float64": 4, "double": 4}
_TENSORE_RATE: Mapping[str, str] = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float8_e4m3fn": "cfp8",
    "float8_e5m2": "cfp8",
    "float8_e4m3fnuz": "cfp8",
    "float8_e5m2fnuz": "cfp8",
}
_CAST_RATE: Mapping[str, str] = {"bf16": "bf16", "fp16": "fp16", "tf32": "tf32", "fp8_e4m3": "cfp8"}


@dataclass(frozen=True)
class CostOptions:
    """Compiler / runtime settings that change the cost of a graph."""

    auto_cast: str = "none"  # none | matmult | all
    auto_cast_type: str = "bf16"  # bf16 | fp16 | tf32 | fp8_e4m3
    stochastic_rounding: bool = False  # recorded; no throughput effect in hardware
    sdk: str = NEWEST  # the Neuron SDK release compiling the graphs (its era's compiler efficiency)

    def __post_init__(self) -> None:
        era_of(self.sdk)  # a release number the emulator models, else ValueError with one line
        if self.auto_cast not in AUTO_CAST_MODES:
            raise ValueError(f"auto-cast must be one of {', '.join(AUTO_CAST_MODES)}, got {self.auto_cast!r}")
        if self.auto_cast_type not in AUTO_CAST_TYPES:
            raise ValueError(f"auto-cast-type must be one of {', '.join(AUTO_CAST_TYPES)}, got {self.auto_cast_type!r}")

    @property
    def casts_matmuls(self) -> bool:
        return self.auto_cast in ("matmult", "all")

    @property
    def casts_storage(self) -> bool:
        return self.auto_cast == "all"


def is_fp32(dtype: str) -> bool:
    return dtype in _FLOAT32


def matmul_rate_dtype(dtype: str, options: CostOptions) -> str:
    """The TensorE rate a matmul with ``dtype`` inputs runs at: a key of ``TensorEngineSpec.peak``."""
    if dtype in _TENSORE_RATE:
        return _TENSORE_RATE[dtype]
    if is_fp32(dtype) and options.casts_matmuls:
        return _CAST_RATE[options.auto_cast_type]
    return "fp32"  # FP32, and integers (executed in FP32 on Trn1 [A14])


def device_itemsize(meta: TensorMeta, options: CostOptions) -> float:
    """Bytes per element of ``meta`` as held in HBM under ``options``."""
    if options.casts_storage and is_fp32(meta.dtype):
        return _CAST_ITEMSIZE[options.auto_cast_type]
    if meta.dtype in _NARROWED:
        return _NARROWED[meta.dtype]
    numel = meta.numel
    return meta.nbytes / numel if numel else 0.0


def device_nbytes(meta: TensorMeta, options: CostOptions) -> int:
    """Bytes of ``meta`` in HBM (auto-cast ``all`` shrinks FP32; INT64/FP64 are narrowed to 4 bytes)."""
    return round(meta.numel * device_itemsize(meta, options))


def dtype_itemsize(dtype: str, options: CostOptions, default: int = 4) -> float:
    """Bytes per element of a ``dtype`` tensor on the device (for payloads known only by dtype)."""
    sizes = {"bfloat16": 2, "float16": 2, "half": 2, "int8": 1, "uint8": 1, "bool": 1, "int16": 2, "int32": 4}
    if options.casts_storage and is_fp32(dtype):
        return _CAST_ITEMSIZE[options.auto_cast_type]
    return _NARROWED.get(dtype, sizes.get(dtype, default))


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off", ""})


def _flag(env: Mapping[str, str], name: str) -> bool | None:
    raw = env.get(name)
    if raw is None:
        return None
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(f"{name} must be 0 or 1, got {raw!r}")


def parse_cc_flags(flags: str) -> dict[str, str]:
    """``--auto-cast X`` / ``--auto-cast=X`` and ``--auto-cast-type Y`` out of a NEURON_CC_FLAGS string."""
    try:
        words = shlex.split(flags)
    except ValueError as exc:
        raise ValueError(f"NEURON_CC_FLAGS cannot be parsed: {exc}") from None
    found: dict[str, str] = {}
    i = 0
    while i < len(words):
        word = words[i]
        for flag in ("--auto-cast", "--auto-cast-type"):
            if word == flag:
                if i + 1 >= len(words) or words[i + 1].startswith("--"):
                    raise ValueError(f"NEURON_CC_FLAGS: {flag} needs a value")
                found[flag] = words[i + 1]
                i += 1
            elif word.startswith(flag + "="):
                found[flag] = word.split("=", 1)[1]
        i += 1
    return found


def options_from_env(env: Mapping[str, str], auto_cast_flag: str | None = None) -> CostOptions:
    """Cost options of a training process from its environment.

    Precedence: ``XLA_USE_BF16`` / ``XLA_DOWNCAST_BF16`` (tensors are BF16 in the framework ->
    ``all``/``bf16``) > ``auto_cast_flag`` (an explicit auto-cast mode, e.g. from a command line) >
    ``--auto-cast`` in ``NEURON_CC_FLAGS`` > default ``none``. The cast type comes from
    ``--auto-cast-type`` (default ``bf16``). Stochastic rounding: ``NEURON_RT_STOCHASTIC_ROUNDING_EN``
    when set, else on with XLA_USE_BF16 / XLA_DOWNCAST_BF16, else off. The SDK release whose
    compiler is modelled: ``NEURON_EMULATOR_SDK`` (default the newest modelled era).
    Bad values raise :class:`ValueError` with a one-line message.
    """
    cc = parse_cc_flags(env.get("NEURON_CC_FLAGS", ""))
    mode = cc.get("--auto-cast", "none")
    if auto_cast_flag is not None:
        mode = auto_cast_flag.strip()
    sdk = env.get("NEURON_EMULATOR_SDK", NEWEST)
    options = CostOptions(auto_cast=mode, auto_cast_type=cc.get("--auto-cast-type", "bf16"), sdk=sdk)  # validates
    use_bf16, downcast_bf16 = _flag(env, "XLA_USE_BF16"), _flag(env, "XLA_DOWNCAST_BF16")
    framework_bf16 = bool(use_bf16) or bool(downcast_bf16)
    if framework_bf16:
        options = CostOptions(auto_cast="all", auto_cast_type="bf16", sdk=sdk)
    sr = _flag(env, "NEURON_RT_STOCHASTIC_ROUNDING_EN")
    return dataclasses.replace(options, stochastic_rounding=framework_bf16 if sr is None else sr)
