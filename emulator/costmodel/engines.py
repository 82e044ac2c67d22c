"""Which NeuronCore-v2 engine runs an ATen op: the one classification table of the cost model.

Engines [A4]: TensorE (128x128 systolic array: matmuls, convolutions), VectorE (arithmetic,
reductions, norms, softmax, comparisons, casts), ScalarE (hardware non-linear functions),
GpSimdE (programmable SIMD: gather/scatter, sort, random numbers, iota), DMA (pure data movement).
View-family and allocation ops move no data and are free.

An op name is what the capture layer records (``"aten.mm"``, also accepted: ``"aten.mm.default"``,
``"aten::mm"``, ``"mm"``); :func:`normalize_op_name` reduces it to the table key (``"mm"``; in-place
``add_`` -> ``add``; other namespaces keep theirs: ``"profiler._record_function_exit"``).
Unknown names fall back to :data:`UNKNOWN_DEFAULT` (VectorE elementwise) with ``known=False``;
:func:`unknown_op_names` lists them for review.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

from emulator.capture.ops import OpRecord


class Engine(StrEnum):
    TENSOR = "tensor"
    VECTOR = "vector"
    SCALAR = "scalar"
    GPSIMD = "gpsimd"
    DMA = "dma"
    NONE = "none"  # free: no engine does anything


BUSY_ENGINES: tuple[Engine, ...] = (Engine.TENSOR, Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD, Engine.DMA)


class OpKind(StrEnum):
    """How an op's work is sized (see ``ops.py``)."""

    MATMUL = "matmul"  # GEMM dimensions from the operand shapes
    CONV = "conv"  # implicit GEMM of a convolution
    ATTENTION = "attention"  # fused scaled-dot-product attention: two (fwd) / five (bwd) GEMMs + softmax
    STREAM = "stream"  # elementwise / reduction: streamed elements = max(sum in, sum out)
    GATHER = "gather"  # reads only the indexed rows of its first input (the table)
    SCATTER = "scatter"  # indexed writes; streamed like STREAM
    SORT = "sort"  # ~log2(n) passes over the data
    COPY = "copy"  # on-device DMA transfer
    HOST_COPY = "host_copy"  # host <-> device over the host link
    FREE = "free"  # views, aliases, allocations: no data moved


@dataclass(frozen=True)
class OpClass:
    engine: Engine
    kind: OpKind
    passes: float = 1.0  # engine cycles per streamed element / lanes (instruction decomposition, see notes)
    note: str = ""
    known: bool = True
    written_lists: tuple[int, ...] = (0,)  # in-place foreach/fused ops without outputs: which input lists are written


def _group(engine: Engine, kind: OpKind, names: str, passes: float = 1.0, note: str = "") -> dict[str, OpClass]:
    return {n: OpClass(engine, kind, passes, note) for n in names.split()}


_T, _V, _S, _G, _D, _N = Engine.TENSOR, Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD, Engine.DMA, Engine.NONE

_GROUPS: tuple[dict[str, OpClass], ...] = (
    # --- TensorE -----------------------------------------------------------------------------
    _group(_T, OpKind.MATMUL, "mm addmm bmm baddbmm addbmm matmul linear dot vdot mv addmv outer ger inner _scaled_mm"),
    _group(_T, OpKind.CONV, "convolution _convolution convolution_backward conv1d conv2d conv3d conv_transpose2d"),
    _group(
        _T,
        OpKind.ATTENTION,
        "_scaled_dot_product_attention_math _scaled_dot_product_flash_attention "
        "_scaled_dot_product_flash_attention_for_cpu _scaled_dot_product_efficient_attention "
        "_scaled_dot_product_cudnn_attention _flash_attention_forward _efficient_attention_forward "
        "_scaled_dot_product_flash_attention_backward _scaled_dot_product_flash_attention_for_cpu_backward "
        "_scaled_dot_product_efficient_attention_backward _scaled_dot_product_cudnn_attention_backward "
        "_flash_attention_backward _efficient_attention_backward",
        note="matmul parts on TensorE; the fused softmax runs on Vector/Scalar concurrently (time = max)",
    ),
    # --- VectorE: arithmetic, comparisons, selection, fills, casts ------------------------------
    _group(
        _V,
        OpKind.STREAM,
        "add sub rsub mul div neg abs sign sgn floor ceil round trunc frac remainder fmod square "
        "clamp clamp_min clamp_max clip minimum maximum fmin fmax copysign lerp addcmul addcdiv "
        "eq ne lt le gt ge logical_and logical_or logical_not logical_xor "
        "bitwise_and bitwise_or bitwise_xor bitwise_not bitwise_left_shift bitwise_right_shift __and__ __or__ __xor__ "
        "where masked_fill isnan isinf isfinite nan_to_num threshold threshold_backward "
        "sigmoid_backward tanh_backward hardtanh hardtanh_backward leaky_relu_backward native_dropout_backward "
        "fill zero zeros ones full zeros_like ones_like full_like new_zeros new_ones new_full scalar_tensor "
        "select_backward slice_backward",
        note="A4: one-input op ~N cycles, two-input ~2N: cycles = streamed elements / 128 lanes",
    ),
    # reductions and scans: one pass over the input
    _group(
        _V,
        OpKind.STREAM,
        "sum mean prod amax amin max min aminmax argmax argmin var std var_mean std_mean norm "
        "linalg_vector_norm frobenius_norm logsumexp any all count_nonzero cumsum cumprod "
        "mse_loss mse_loss_backward l1_loss smooth_l1_loss smooth_l1_loss_backward "
        "binary_cross_entropy binary_cross_entropy_backward binary_cross_entropy_with_logits "
        "max_pool2d_with_indices avg_pool2d avg_pool2d_backward _adaptive_avg_pool2d "
        "_adaptive_avg_pool2d_backward adaptive_max_pool2d",
        note="one streaming pass over the input",
    ),
    # softmax: max-reduce, exp-with-bias + running sum, scale: ~3 passes over the input
    _group(_V, OpKind.STREAM, "_softmax _safe_softmax softmax _log_softmax log_softmax", 3.0, "max, exp+sum, scale"),
    # softmax backward reads grad and output (2N): multiply-reduce 2N + combine 2N -> 4N = 2 x streamed
    _group(_V, OpKind.STREAM, "_softmax_backward_data _log_softmax_backward_data", 2.0, "reduce 2N + combine 2N"),
    # norms: statistics 1N, normalise 1N, affine gamma/beta 2N -> 4N; backward ~8N over 2N streamed
    _group(
        _V,
        OpKind.STREAM,
        "native_layer_norm native_batch_norm _native_batch_norm_legit _native_batch_norm_legit_functional "
        "_native_batch_norm_legit_no_training native_group_norm rms_norm _fused_rms_norm",
        4.0,
        "stats 1N + normalise 1N + affine 2N",
    ),
    _group(
        _V,
        OpKind.STREAM,
        "native_layer_norm_backward native_batch_norm_backward native_group_norm_backward _fused_rms_norm_backward",
        4.0,
        "reads grad and input (2N); ~8N cycles of reductions and combines",
    ),
    # optimizer foreach ops: streamed = all list elements
    _group(
        _V,
        OpKind.STREAM,
        "_foreach_add _foreach_sub _foreach_mul _foreach_div _foreach_addcmul _foreach_addcdiv _foreach_lerp "
        "_foreach_maximum _foreach_minimum _foreach_clamp_min _foreach_clamp_max _foreach_neg _foreach_abs "
        "_foreach_zero _foreach_norm _foreach_sign _amp_foreach_non_finite_check_and_unscale _amp_update_scale "
        "_fused_sgd",
        note="one streaming pass over every tensor of the lists",
    ),
    {
        n: OpClass(
            _V,
            OpKind.STREAM,
            2.5,
            "Adam(W): ~10N VectorE cycles (moment updates 2N+3N, divide 2N, update 2N, decay 1N) over 4N streamed "
            "(param, grad, exp_avg, exp_avg_sq); the sqrt on ScalarE runs concurrently",
            written_lists=(0, 2, 3),
        )
        for n in ("_fused_adam", "_fused_adamw")
    },
    # --- ScalarE: hardware non-linear functions (A4) -----------------------------------------
    _group(
        _S,
        OpKind.STREAM,
        "relu gelu silu sigmoid tanh exp exp2 expm1 log log2 log10 log1p sqrt rsqrt pow reciprocal erf erfc "
        "erfinv sin cos tan asin acos atan atan2 sinh cosh asinh acosh atanh softplus mish elu selu celu "
        "leaky_relu rrelu hardswish hardsigmoid log_sigmoid_forward logit xlogy "
        "gelu_backward silu_backward elu_backward softplus_backward mish_backward log_sigmoid_backward "
        "hardswish_backward hardsigmoid_backward "
        "_foreach_sqrt _foreach_exp _foreach_log _foreach_pow _foreach_reciprocal _foreach_sigmoid _foreach_tanh",
        note="ScalarE activation: 128 elem/cycle at 1.4 GHz, one input tensor per instruction; relu is an "
        "activation function on ScalarE (fused with PSUM evacuation after a matmul)",
    ),
    # --- GpSimd: indexed access, sort, random numbers, iota --------------------------------------
    _group(
        _G,
        OpKind.GATHER,
        "embedding index_select gather index take masked_select nll_loss_forward nll_loss2d_forward "
        "embedding_bag _embedding_bag",
        note="only the indexed rows of the table are read",
    ),
    _group(
        _G,
        OpKind.SCATTER,
        "scatter scatter_add scatter_reduce index_add index_put _index_put_impl index_copy index_fill "
        "index_reduce masked_scatter put embedding_dense_backward nll_loss_backward nll_loss2d_backward "
        "max_pool2d_with_indices_backward _embedding_bag_backward",
    ),
    _group(_G, OpKind.SORT, "sort topk argsort kthvalue median msort unique _unique2 unique_consecutive"),
    _group(
        _G,
        OpKind.STREAM,
        "bernoulli rand rand_like randn randn_like randint randint_like uniform normal exponential random "
        "randperm multinomial native_dropout poisson arange linspace",
        note="random numbers and iota on the programmable GpSimd engine (assumption: not in A4's cost rules)",
    ),
    # --- DMA: pure data movement ---------------------------------------------------------------
    _group(
        _D,
        OpKind.COPY,
        "copy _to_copy clone contiguous cat _cat stack repeat flip roll constant_pad_nd slice_scatter "
        "select_scatter as_strided_scatter diagonal_scatter expand_copy permute_copy transpose_copy "
        "view_copy t_copy unfold_copy _copy_from _copy_from_and_resize",
        note="a transfer between HBM locations (copies that change dtype run on VectorE instead)",
    ),
    _group(_D, OpKind.HOST_COPY, "_local_scalar_dense emulator.host_to_device emulator.device_to_host"),
    # --- free: views, aliases, allocations -----------------------------------------------------
    _group(
        _N,
        OpKind.FREE,
        "view _unsafe_view view_as reshape _reshape_alias t transpose permute expand expand_as slice select "
        "unsqueeze squeeze as_strided detach alias split split_with_sizes unsafe_split chunk unbind narrow "
        "diagonal movedim flatten unflatten unfold _neg_view _conj real imag lift_fresh lift "
        "empty empty_like empty_strided new_empty new_empty_strided resize set _has_compatible_shallow_copy_type "
        "sym_size sym_stride sym_numel is_same_size",
        note="no data moved",
    ),
)


def _merge(groups: Iterable[dict[str, OpClass]]) -> dict[str, OpClass]:
    table: dict[str, OpClass] = {}
    for group in groups:
        for name, cls in group.items():
            if name in table:
                raise ValueError(f"op {name!r} classified twice")
            table[name] = cls
    return table


OP_TABLE: Mapping[str, OpClass] = MappingProxyType(_merge(_GROUPS))
"""Normalized op name -> engine, kind, passes. The single source of op classification."""

FREE_NAMESPACES: frozenset[str] = frozenset({"profiler"})  # bookkeeping ops of torch itself

UNKNOWN_DEFAULT = OpClass(
    _V,
    OpKind.STREAM,
    note="unknown op: VectorE elementwise over max(input, output) elements (documented default)",
    known=False,
)

_DTYPE_CONVERT = OpClass(_V, OpKind.STREAM, note="dtype conversion inside the core (VectorE cast)")
_CONVERTING_COPIES = frozenset({"copy", "_to_copy", "_copy_from", "_copy_from_and_resize"})


def normalize_op_name(name: str) -> str:
    """``"aten.add_.Tensor"`` / ``"aten::add_"`` / ``"add_"`` -> ``"add"``; other namespaces are kept."""
    parts = name.strip().replace("::", ".").split(".")
    namespace, base = (parts[0], parts[1]) if len(parts) > 1 else ("aten", parts[0])
    if base.endswith("_") and not base.endswith("__"):
        base = base[:-1]
    return base if namespace == "aten" else f"{namespace}.{base}"


def classify_name(name: str) -> OpClass:
    """Classification by name alone (copies are DMA here; :func:`classify` looks at dtypes)."""
    key = normalize_op_name(name)
    if key.split(".", 1)[0] in FREE_NAMESPACES and "." in key:
        return OpClass(_N, OpKind.FREE, note="framework bookkeeping")
    return OP_TABLE.get(key, UNKNOWN_DEFAULT)


def classify(op: OpRecord) -> OpClass:
    """Engine and kind of one captured op; a copy that changes dtype is a VectorE cast."""
    cls = classify_name(op.name)
    name = normalize_op_name(op.name)
    if cls.kind is not OpKind.COPY or name not in _CONVERTING_COPIES or not op.inputs:
        return cls
    # copy_(self, src) and _to_copy(src): the source is the last input, the result the destination;
    # _copy_from(self, dst): the source is the first input
    from_first = name.startswith("_copy_from")
    src = op.inputs[0] if from_first else op.inputs[-1]
    dst = op.outputs[0] if op.outputs else op.inputs[1 if from_first and len(op.inputs) > 1 else 0]
    return _DTYPE_CONVERT if src.dtype != dst.dtype else cls


def unknown_op_names(ops: Iterable[OpRecord]) -> tuple[str, ...]:
    """Sorted normalized names the table does not know (costed with :data:`UNKNOWN_DEFAULT`)."""
    return tuple(sorted({normalize_op_name(op.name) for op in ops if not classify_name(op.name).known}))
