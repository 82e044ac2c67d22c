"""Analytic training steps of the published calibration rows, and the model's throughput for them.

Superseded as the prediction by ``neuron-emulator bench`` (``emulator/parallel``, docs/parallel.md),
which traces the real model code; kept as an analytic cross-check and as op-list test fixtures.

docs/reference/trn1-runtime.md §Published training rows lists two Trn1 training rows. This module writes down, from the
models' dimensions only, the ATen op list one training micro-step would capture on one
NeuronCore (forward, backward, gradient accumulation; the optimizer step and the collectives
separately), runs it through the cost model and compares the throughput with the row. Nothing
here is tuned to the rows: the op lists follow the public model code (HF ``BertForPreTraining``,
Megatron-LM GPT with tensor parallelism), the costs come from ``ops.py`` / ``graph.py`` /
``topology.py``.

Assumptions (stated, not fitted): no activation recomputation; dropout everywhere the reference
models have it; BERT's MLM head scores all tokens (HF semantics); Megatron pads the vocabulary to a
multiple of 128 x TP; AdamW as one fused op; gradient clipping by global norm; gradients kept in
the training dtype; the data-parallel all-reduce is not overlapped with the backward pass.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from emulator.capture.ops import OpRecord, TensorMeta
from emulator.costmodel.dtypes import CostOptions, dtype_itemsize
from emulator.costmodel.graph import GraphCost, cost_graph
from emulator.costmodel.topology import cost_group_collective
from emulator.hardware.instance_types import TRN1_32XLARGE, InstanceType
from emulator.hardware.neuroncore_v2 import NEURONCORE_V2, NeuronCoreV2Spec

Shape = tuple[int, ...]
_ITEMSIZE = {"float32": 4, "bfloat16": 2, "float16": 2, "int64": 8, "bool": 1}
_SPEC = "S3 re:Invent 2022 deck; Neuron BERT and Megatron-LM tutorials, SDK 2.3 (docs/reference/trn1-runtime.md)"


def tensor(shape: Shape, dtype: str = "float32") -> TensorMeta:
    return TensorMeta(tuple(shape), dtype, math.prod(shape) * _ITEMSIZE[dtype])


@dataclass(frozen=True)
class TransformerConfig:
    name: str
    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int
    seq: int
    micro_batch: int
    tp: int = 1
    causal: bool = False  # GPT (masked_fill causal mask, pre-LN) vs BERT (additive padding mask, post-LN)
    max_positions: int = 512
    type_vocab: int = 0  # BERT token types
    bert_heads: bool = False  # MLM head (dense, gelu, LN, tied decoder) + NSP head

    @property
    def tokens(self) -> int:
        return self.micro_batch * self.seq

    @property
    def local_vocab(self) -> int:
        return self.vocab // self.tp


@dataclass
class _Ops:
    """Appends OpRecords; ``dt`` is the dtype of floating tensors."""

    dt: str
    ops: list[OpRecord] = field(default_factory=list)
    tp_collectives: list[int] = field(default_factory=list)  # element counts of TP all-reduces

    def add(self, name: str, ins: Sequence[Shape | TensorMeta], outs: Sequence[Shape | TensorMeta], flops: int = 0):
        def meta(x: Shape | TensorMeta) -> TensorMeta:
            return x if isinstance(x, TensorMeta) else tensor(x, self.dt)

        self.ops.append(OpRecord(f"aten.{name}", tuple(map(meta, ins)), tuple(map(meta, outs)), flops))

    def mm(self, m: int, k: int, n: int, bias: bool = False, batch: int = 0) -> None:
        flops = 2 * max(1, batch) * m * k * n
        if batch:
            self.add("bmm", [(batch, m, k), (batch, k, n)], [(batch, m, n)], flops)
        elif bias:
            self.add("addmm", [(n,), (m, k), (k, n)], [(m, n)], flops)
        else:
            self.add("mm", [(m, k), (k, n)], [(m, n)], flops)

    def views(self, count: int = 1) -> None:
        for name in ("view", "t", "permute", "_unsafe_view", "expand")[:count]:
            self.add(name, [(1,)], [(1,)])

    def linear_fwd(self, t: int, k: int, n: int, bias: bool = True) -> None:
        self.views(1)
        self.mm(t, k, n, bias=bias)

    def linear_bwd(self, t: int, k: int, n: int, bias: bool = True) -> None:
        self.views(2)
        self.mm(t, n, k)  # dX = dY W
        self.mm(n, t, k)  # dW = dY^T X
        if bias:
            self.add("sum", [(t, n)], [(n,)])

    def layer_norm(self, t: int, h: int) -> None:
        self.add("native_layer_norm", [(t, h), (h,), (h,)], [(t, h), (t, 1), (t, 1)])

    def layer_norm_bwd(self, t: int, h: int) -> None:
        self.add("native_layer_norm_backward", [(t, h), (t, h), (t, 1), (t, 1), (h,), (h,)], [(t, h), (h,), (h,)])

    def dropout(self, shape: Shape) -> None:
        self.add("native_dropout", [shape], [shape, tensor(shape, "bool")])

    def dropout_bwd(self, shape: Shape) -> None:
        self.add("native_dropout_backward", [shape, tensor(shape, "bool")], [shape])


def _attention_fwd(o: _Ops, c: TransformerConfig) -> None:
    t, h, b, s = c.tokens, c.hidden, c.micro_batch, c.seq
    heads, d = c.heads // c.tp, c.hidden // c.heads
    hl, bh = heads * d, b * heads
    if c.causal:
        o.linear_fwd(t, h, 3 * hl)  # fused QKV, column parallel
    else:
        for _ in range(3):
            o.linear_fwd(t, h, hl)
    o.views(3)
    o.mm(s, d, s, batch=bh)  # Q K^T
    o.add("div", [(b, heads, s, s)], [(b, heads, s, s)])
    if c.causal:
        o.add("masked_fill", [(b, heads, s, s), tensor((1, 1, s, s), "bool")], [(b, heads, s, s)])
    else:
        o.add("add", [(b, heads, s, s), (b, 1, 1, s)], [(b, heads, s, s)])
    o.add("_softmax", [(b, heads, s, s)], [(b, heads, s, s)])
    o.dropout((b, heads, s, s))
    o.mm(s, s, d, batch=bh)  # P V
    o.views(1)
    o.add("clone", [(b, s, heads, d)], [(b, s, heads, d)])  # permute(...).contiguous()
    _row_parallel_fwd(o, c, hl)


def _row_parallel_fwd(o: _Ops, c: TransformerConfig, k: int) -> None:
    """Output projection of a block: bias + all-reduce under TP, then dropout + residual."""
    t, h = c.tokens, c.hidden
    if c.tp > 1:
        o.linear_fwd(t, k, h, bias=False)
        o.tp_collectives.append(t * h)
        o.add("add", [(t, h), (h,)], [(t, h)])
    else:
        o.linear_fwd(t, k, h)
    o.dropout((t, h))
    o.add("add", [(t, h), (t, h)], [(t, h)])  # residual


def _row_parallel_bwd(o: _Ops, c: TransformerConfig, k: int) -> None:
    t, h = c.tokens, c.hidden
    o.dropout_bwd((t, h))
    if c.tp > 1:
        o.add("sum", [(t, h)], [(h,)])
    o.linear_bwd(t, k, h, bias=c.tp == 1)


def _mlp_fwd(o: _Ops, c: TransformerConfig) -> None:
    t, fl = c.tokens, c.ffn // c.tp
    o.linear_fwd(t, c.hidden, fl)
    o.add("gelu", [(t, fl)], [(t, fl)])
    _row_parallel_fwd(o, c, fl)


def _mlp_bwd(o: _Ops, c: TransformerConfig) -> None:
    t, h, fl = c.tokens, c.hidden, c.ffn // c.tp
    _row_parallel_bwd(o, c, fl)
    o.add("gelu_backward", [(t, fl), (t, fl)], [(t, fl)])
    o.linear_bwd(t, h, fl)
    if c.tp > 1:
        o.tp_collectives.append(t * h)


def _attention_bwd(o: _Ops, c: TransformerConfig) -> None:
    t, h, b, s = c.tokens, c.hidden, c.micro_batch, c.seq
    heads, d = c.heads // c.tp, c.hidden // c.heads
    hl, bh = heads * d, b * heads
    _row_parallel_bwd(o, c, hl)
    o.views(2)
    o.add("clone", [(b, heads, s, d)], [(b, heads, s, d)])
    o.mm(s, d, s, batch=bh)  # dP = dO V^T
    o.mm(s, s, d, batch=bh)  # dV = P^T dO
    o.dropout_bwd((b, heads, s, s))
    o.add("_softmax_backward_data", [(b, heads, s, s), (b, heads, s, s)], [(b, heads, s, s)])
    if c.causal:
        o.add("masked_fill", [(b, heads, s, s), tensor((1, 1, s, s), "bool")], [(b, heads, s, s)])
    o.add("div", [(b, heads, s, s)], [(b, heads, s, s)])
    o.mm(s, s, d, batch=bh)  # dQ = dS K
    o.mm(d, s, s, batch=bh)  # dK^T = Q^T dS
    o.views(3)
    if c.causal:
        o.add("cat", [(t, hl)] * 3, [(t, 3 * hl)])
        o.linear_bwd(t, h, 3 * hl)
    else:
        for _ in range(3):
            o.add("clone", [(t, hl)], [(t, hl)])
            o.linear_bwd(t, h, hl)
        o.add("add", [(t, h), (t, h)], [(t, h)])
        o.add("add", [(t, h), (t, h)], [(t, h)])
    if c.tp > 1:
        o.tp_collectives.append(t * h)


def _layer_fwd(o: _Ops, c: TransformerConfig) -> None:
    t, h = c.tokens, c.hidden
    if c.causal:  # pre-LN
        o.layer_norm(t, h)
        _attention_fwd(o, c)
        o.layer_norm(t, h)
        _mlp_fwd(o, c)
    else:  # post-LN
        _attention_fwd(o, c)
        o.layer_norm(t, h)
        _mlp_fwd(o, c)
        o.layer_norm(t, h)


def _layer_bwd(o: _Ops, c: TransformerConfig) -> None:
    t, h = c.tokens, c.hidden
    if c.causal:
        _mlp_bwd(o, c)
        o.layer_norm_bwd(t, h)
        o.add("add", [(t, h), (t, h)], [(t, h)])  # residual branch + LN branch
        _attention_bwd(o, c)
        o.layer_norm_bwd(t, h)
        o.add("add", [(t, h), (t, h)], [(t, h)])
    else:
        o.layer_norm_bwd(t, h)
        _mlp_bwd(o, c)
        o.add("add", [(t, h), (t, h)], [(t, h)])
        o.layer_norm_bwd(t, h)
        _attention_bwd(o, c)
        o.add("add", [(t, h), (t, h)], [(t, h)])


def _embeddings_fwd(o: _Ops, c: TransformerConfig) -> None:
    t, h, b, s, v = c.tokens, c.hidden, c.micro_batch, c.seq, c.local_vocab
    ids = tensor((b, s), "int64")
    if c.tp > 1:  # vocab-parallel embedding: mask ids outside this shard, gather, zero, all-reduce
        mask = tensor((b, s), "bool")
        o.add("lt", [ids], [mask])
        o.add("ge", [ids], [mask])
        o.add("bitwise_or", [mask, mask], [mask])
        o.add("sub", [ids], [ids])
        o.add("masked_fill", [ids, mask], [ids])
        o.add("embedding", [(v, h), ids], [(b, s, h)])
        o.add("masked_fill", [(b, s, h), tensor((b, s, 1), "bool")], [(b, s, h)])
        o.tp_collectives.append(t * h)
    else:
        o.add("embedding", [(v, h), ids], [(b, s, h)])
    o.add("embedding", [(c.max_positions, h), tensor((1, s), "int64")], [(1, s, h)])
    o.add("add", [(b, s, h), (1, s, h)], [(b, s, h)])
    if c.type_vocab:
        o.add("embedding", [(c.type_vocab, h), ids], [(b, s, h)])
        o.add("add", [(b, s, h), (b, s, h)], [(b, s, h)])
        o.layer_norm(t, h)
    o.dropout((b, s, h))


def _embeddings_bwd(o: _Ops, c: TransformerConfig) -> None:
    t, h, b, s, v = c.tokens, c.hidden, c.micro_batch, c.seq, c.local_vocab
    ids = tensor((b, s), "int64")
    o.dropout_bwd((b, s, h))
    if c.type_vocab:
        o.layer_norm_bwd(t, h)
        o.add("embedding_dense_backward", [(b, s, h), ids], [(c.type_vocab, h)])
    o.add("sum", [(b, s, h)], [(1, s, h)])
    o.add("embedding_dense_backward", [(1, s, h), tensor((1, s), "int64")], [(c.max_positions, h)])
    if c.tp > 1:
        o.add("masked_fill", [(b, s, h), tensor((b, s, 1), "bool")], [(b, s, h)])
    o.add("embedding_dense_backward", [(b, s, h), ids], [(v, h)])


def _bert_heads_fwd(o: _Ops, c: TransformerConfig) -> None:
    t, h, b, v = c.tokens, c.hidden, c.micro_batch, c.vocab
    o.linear_fwd(t, h, h)  # MLM transform
    o.add("gelu", [(t, h)], [(t, h)])
    o.layer_norm(t, h)
    o.linear_fwd(t, h, v)  # decoder, weight tied to the word embedding
    o.add("_log_softmax", [(t, v)], [(t, v)])
    o.add("nll_loss_forward", [(t, v), tensor((t,), "int64")], [(), ()])
    o.add("select", [(b, c.seq, h)], [(b, h)])  # pooler: first token
    o.linear_fwd(b, h, h)
    o.add("tanh", [(b, h)], [(b, h)])
    o.linear_fwd(b, h, 2)  # NSP
    o.add("_log_softmax", [(b, 2)], [(b, 2)])
    o.add("nll_loss_forward", [(b, 2), tensor((b,), "int64")], [(), ()])
    o.add("add", [(), ()], [()])
    o.add("div", [()], [()])  # loss / gradient-accumulation steps


def _bert_heads_bwd(o: _Ops, c: TransformerConfig) -> None:
    t, h, b, v = c.tokens, c.hidden, c.micro_batch, c.vocab
    o.add("ones_like", [()], [()])
    o.add("nll_loss_backward", [(), (b, 2), tensor((b,), "int64"), ()], [(b, 2)])
    o.add("_log_softmax_backward_data", [(b, 2), (b, 2)], [(b, 2)])
    o.linear_bwd(b, h, 2)
    o.add("tanh_backward", [(b, h), (b, h)], [(b, h)])
    o.linear_bwd(b, h, h)
    o.add("select_backward", [(b, h)], [(b, c.seq, h)])
    o.add("nll_loss_backward", [(), (t, v), tensor((t,), "int64"), ()], [(t, v)])
    o.add("_log_softmax_backward_data", [(t, v), (t, v)], [(t, v)])
    o.linear_bwd(t, h, v)
    o.layer_norm_bwd(t, h)
    o.add("gelu_backward", [(t, h), (t, h)], [(t, h)])
    o.linear_bwd(t, h, h)
    o.add("add", [(t, h), (t, h)], [(t, h)])  # + pooler path
    o.add("add", [(v, h), (v, h)], [(v, h)])  # tied decoder + embedding gradients


def _gpt_head_fwd(o: _Ops, c: TransformerConfig) -> None:
    t, h, v = c.tokens, c.hidden, c.local_vocab
    o.layer_norm(t, h)
    o.linear_fwd(t, h, v, bias=False)  # tied, column parallel over the vocabulary
    # vocab-parallel cross entropy (Megatron): max, shift, target logit, sum of exp, all-reduced over TP
    tgt, mask = tensor((t,), "int64"), tensor((t,), "bool")
    o.add("amax", [(t, v)], [(t,)])
    o.tp_collectives.append(t)
    o.add("sub", [(t, v), (t, 1)], [(t, v)])
    for name in ("lt", "ge"):
        o.add(name, [tgt], [mask])
    o.add("bitwise_or", [mask, mask], [mask])
    o.add("sub", [tgt], [tgt])
    o.add("masked_fill", [tgt, mask], [tgt])
    o.add("index", [(t, v), tgt], [(t,)])
    o.add("masked_fill", [(t,), mask], [(t,)])
    o.tp_collectives.append(t)
    o.add("exp", [(t, v)], [(t, v)])
    o.add("sum", [(t, v)], [(t,)])
    o.tp_collectives.append(t)
    o.add("log", [(t,)], [(t,)])
    o.add("sub", [(t,), (t,)], [(t,)])
    o.add("div", [(t, v), (t, 1)], [(t, v)])  # softmax kept for the backward
    o.add("mean", [(t,)], [()])


def _gpt_head_bwd(o: _Ops, c: TransformerConfig) -> None:
    t, h, v = c.tokens, c.hidden, c.local_vocab
    o.add("index_put", [(t, v), tensor((t,), "int64"), (t,)], [(t, v)])  # softmax - one-hot
    o.add("mul", [(t, v), (t, 1)], [(t, v)])
    o.linear_bwd(t, h, v, bias=False)
    o.tp_collectives.append(t * h)
    o.add("add", [(v, h), (v, h)], [(v, h)])  # tied with the word embedding
    o.layer_norm_bwd(t, h)


def parameter_shapes(c: TransformerConfig) -> list[Shape]:
    """Shapes of the parameters one NeuronCore holds (its TP shard)."""
    h, fl, hl = c.hidden, c.ffn // c.tp, c.hidden // c.tp
    shapes: list[Shape] = [(c.local_vocab, h), (c.max_positions, h)]
    if c.type_vocab:
        shapes += [(c.type_vocab, h), (h,), (h,)]
    for _ in range(c.layers):
        if c.causal:
            shapes += [(h,), (h,), (3 * hl, h), (3 * hl,)]
        else:
            shapes += [(hl, h), (hl,)] * 3
        shapes += [(h, hl), (h,), (h,), (h,), (fl, h), (fl,), (h, fl), (h,)]
        shapes += [] if c.causal else [(h,), (h,)]
    if c.bert_heads:
        shapes += [(h, h), (h,), (h, h), (h,), (h,), (h,), (c.vocab,), (2, h), (2,)]
    else:
        shapes += [(h,), (h,)]
    return shapes


def micro_step_ops(c: TransformerConfig, dtype: str = "float32", accumulate: bool = True) -> _Ops:
    """Forward + backward (+ gradient accumulation) of one micro-batch on one NeuronCore."""
    o = _Ops(dtype)
    _embeddings_fwd(o, c)
    for _ in range(c.layers):
        _layer_fwd(o, c)
    (_bert_heads_fwd if c.bert_heads else _gpt_head_fwd)(o, c)
    (_bert_heads_bwd if c.bert_heads else _gpt_head_bwd)(o, c)
    for _ in range(c.layers):
        _layer_bwd(o, c)
    _embeddings_bwd(o, c)
    if accumulate:
        for shape in parameter_shapes(c):
            o.add("add_", [shape, shape], [shape])
    return o


def optimizer_ops(c: TransformerConfig, dtype: str = "float32") -> list[OpRecord]:
    """Global-norm gradient clipping and one fused AdamW step over the core's parameters."""
    o = _Ops(dtype)
    shapes = parameter_shapes(c)
    grads = [tensor(s, dtype) for s in shapes]
    scalars = [tensor((), dtype) for _ in shapes]
    o.add("_foreach_norm", grads, scalars)
    o.add("stack", scalars, [(len(shapes),)])
    o.add("linalg_vector_norm", [(len(shapes),)], [()])
    o.add("add", [()], [()])
    o.add("div", [(), ()], [()])
    o.add("clamp", [()], [()])
    o.add("_foreach_mul_", [*grads, tensor((), dtype)], [])
    o.add("_fused_adamw_", grads * 4 + scalars, [])
    return o.ops


@dataclass(frozen=True)
class CalibrationRow:
    """One published training row (docs/reference/trn1-runtime.md §Published training rows)."""

    config: TransformerConfig
    cores: int
    dp: int
    global_batch: int
    published_seq_per_s: float
    env: tuple[tuple[str, str], ...]  # what the run set: BF16 + stochastic rounding
    source: str = _SPEC

    @property
    def grad_accum(self) -> int:
        return self.global_batch // (self.dp * self.config.micro_batch)


_BF16_SR = (("XLA_USE_BF16", "1"), ("NEURON_RT_STOCHASTIC_ROUNDING_EN", "1"))

BERT_LARGE_PH1 = CalibrationRow(
    config=TransformerConfig(
        "BERT-Large Ph1",
        layers=24,
        hidden=1024,
        heads=16,
        ffn=4096,
        vocab=30522,
        seq=128,
        micro_batch=16,
        type_vocab=2,
        bert_heads=True,
    ),
    cores=32,
    dp=32,
    global_batch=16384,
    published_seq_per_s=2846,
    env=_BF16_SR,
)

GPT3_6_7B_TP8 = CalibrationRow(
    config=TransformerConfig(
        "GPT3-6.7B TP8",
        layers=32,
        hidden=4096,
        heads=32,
        ffn=16384,
        vocab=51200,  # 50257 padded to a multiple of 128 x TP 8 (Megatron)
        seq=2048,
        micro_batch=1,
        tp=8,
        causal=True,
        max_positions=2048,
    ),
    cores=32,
    dp=4,
    global_batch=64,
    published_seq_per_s=7.3,
    env=_BF16_SR,
)

CALIBRATION_ROWS: tuple[CalibrationRow, ...] = (BERT_LARGE_PH1, GPT3_6_7B_TP8)


@dataclass(frozen=True)
class CalibrationResult:
    row: CalibrationRow
    options: CostOptions
    first_micro: GraphCost  # micro-step without gradient accumulation (after zero_grad)
    micro: GraphCost  # micro-step with accumulation
    optimizer: GraphCost
    tp_collective_seconds: float  # per micro-step
    dp_allreduce_seconds: float  # per global step
    step_seconds: float  # one global batch
    modelled_seq_per_s: float

    @property
    def ratio(self) -> float:
        """Modelled / published throughput."""
        return self.modelled_seq_per_s / self.row.published_seq_per_s

    @property
    def mfu(self) -> float:
        """6 N D model-FLOP utilisation at 95 TFLOPS / NC (docs/reference/trn1-runtime.md §Published training rows)."""
        params = sum(math.prod(s) for s in parameter_shapes(self.row.config)) * self.row.config.tp
        return 6 * params * self.row.config.seq * self.modelled_seq_per_s / (self.row.cores * 95e12)


def _device_seconds(graph: GraphCost) -> float:
    return graph.device_seconds


def model_row(
    row: CalibrationRow,
    options: CostOptions,
    instance: InstanceType = TRN1_32XLARGE,
    *,
    core: NeuronCoreV2Spec = NEURONCORE_V2,
    device_time: Callable[[GraphCost], float] = _device_seconds,
) -> CalibrationResult:
    """Modelled throughput of a calibration row (sequences per second over the whole instance).

    ``core`` and ``device_time`` exist for sensitivity studies (e.g. ``lambda g: g.serial_seconds``
    for "no engine overlap"); the defaults are the model. The collectives are costed on the cores
    of the first Megatron groups: tensor-parallel ``0 .. TP-1``, data-parallel every ``TP``-th core
    (one group at a time: the analytic step does not model the other groups' traffic).
    """
    c = row.config
    first, rest = micro_step_ops(c, accumulate=False), micro_step_ops(c)
    first_cost, rest_cost = cost_graph(first.ops, options, core), cost_graph(rest.ops, options, core)
    opt_cost = cost_graph(optimizer_ops(c), options, core)
    item = dtype_itemsize("float32", options)
    tp_group, dp_group = range(c.tp), range(0, c.tp * row.dp, c.tp)
    tp = sum(
        cost_group_collective("all_reduce", round(n * item), tp_group, instance).seconds for n in first.tp_collectives
    )
    grad_bytes = round(sum(math.prod(s) for s in parameter_shapes(c)) * item)
    dp = cost_group_collective("all_reduce", grad_bytes, dp_group, instance).seconds
    accum = row.grad_accum
    step = device_time(first_cost) + (accum - 1) * device_time(rest_cost) + accum * tp
    step += device_time(opt_cost) + dp
    return CalibrationResult(row, options, first_cost, rest_cost, opt_cost, tp, dp, step, row.global_batch / step)
