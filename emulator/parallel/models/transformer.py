"""One configurable transformer for the model-scale workloads (BERT, GPT-3, Llama, ViT), laid
out as Megatron-LM / neuronx-distributed lay out a tensor-parallel model, and built one
pipeline stage at a time.

Per rank and stage: activations are ``[s, b, h]`` (``[s/tp, b, h]`` under sequence
parallelism); attention (``attention.py``) is plain ops (projections, matmul, mask, softmax,
matmul), or with ``flash_attention`` one fused kernel per direction, so every op the capture
layer records has a shape and a FLOP count.

Activation recomputation (``recompute``, docs/parallel.md §Memory): ``full`` checkpoints every
layer (its whole forward runs again in backward: Megatron's and NeMo's ``full``/``uniform``),
``selective`` only the attention core between the QKV projection and the output projection
(Megatron's ``selective``: what is cheap to recompute and holds the sequence x sequence scores).
``recompute_mlp`` recomputes part of the MLP too: ``activation`` its activation function (NxD's
Llama ``activation_mlp`` checkpoint), ``module`` the whole MLP (NxD/NxDT's ``LlamaMLP`` among the
checkpointed modules); with ``full`` the whole layer is recomputed anyway.

Tensor-parallel layout of a layer (see ``docs/models.md``): QKV column-parallel (split by heads;
GQA key/value heads split over tp, or replicated to one per rank when ``tp > kv_heads``, as NxD's
``kv_replicator`` does), attention output row-parallel, MLP up (and gate) column-parallel and
down row-parallel, norms replicated. The word embedding is vocab-parallel, the LM head
column-parallel over the vocabulary and its loss the vocab-parallel cross entropy.

The model's dimensions come from :class:`emulator.workloads.models.zoo.ModelSpec`.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from emulator.parallel import comm
from emulator.parallel.layers import (
    ColumnParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
    vocab_parallel_cross_entropy,
)
from emulator.parallel.mappings import (
    column_parallel_linear,
    gather_from_sp_region,
    sequence_parallel,
    tp_rank,
    tp_size,
)
from emulator.parallel.models.attention import Attention, RotaryEmbedding, dropout
from emulator.parallel.partition import mark_sequence_parallel, set_tensor_model_parallel_attributes
from emulator.workloads.models.recipes import RECOMPUTE, RECOMPUTE_MLP
from emulator.workloads.models.zoo import ModelSpec

IGNORE_INDEX = -100  # MLM label of the positions that are not predicted (HF convention)


def _weight(*shape: int) -> nn.Parameter:
    w = torch.empty(*shape)
    if not w.is_meta:  # real values only off meta (tests, real runs of small configs)
        nn.init.normal_(w, std=0.02)
    return nn.Parameter(w)


def _mark_sequence_parallel(module: nn.Module) -> None:
    """Parameters applied to sequence slices: each rank's gradient is partial under SP."""
    if sequence_parallel():
        for p in module.parameters():
            mark_sequence_parallel(p)


class Linear(nn.Module):
    """A replicated (not tensor-parallel) linear layer: poolers, classifier heads."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True) -> None:
        super().__init__()
        self.weight = _weight(out_features, in_features)
        self.bias = nn.Parameter(torch.zeros(out_features)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class LayerNorm(nn.Module):
    def __init__(self, hidden: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))
        self.bias = nn.Parameter(torch.zeros(hidden))
        _mark_sequence_parallel(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


class RMSNorm(nn.Module):
    """``x / rms(x) * weight`` (Llama), written as plain ops."""

    def __init__(self, hidden: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))
        _mark_sequence_parallel(self)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def make_norm(spec: ModelSpec) -> nn.Module:
    if spec.norm == "rmsnorm":
        return RMSNorm(spec.hidden, spec.norm_eps)
    return LayerNorm(spec.hidden, spec.norm_eps)


class MLP(nn.Module):
    """GELU MLP (up, down) or SwiGLU (gate and up fused in one column-parallel layer, down);
    ``recompute``: what of it runs again in backward (module docstring)."""

    def __init__(self, spec: ModelSpec, recompute: str = "none") -> None:
        super().__init__()
        if recompute not in RECOMPUTE_MLP:
            raise ValueError(f"recompute_mlp {recompute!r}: expected one of {', '.join(RECOMPUTE_MLP)}")
        self.recompute = recompute
        self.gated = spec.activation == "swiglu"
        up = 2 * spec.ffn if self.gated else spec.ffn
        if spec.ffn % tp_size():
            raise ValueError(f"{spec.name}: FFN size {spec.ffn} is not divisible by tensor-parallel size {tp_size()}")
        self.up = ColumnParallelLinear(spec.hidden, up, bias=spec.bias)
        self.down = RowParallelLinear(spec.ffn, spec.hidden, bias=spec.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mode = self.recompute if torch.is_grad_enabled() else "none"
        if mode == "module":  # the input through the closure, as StageModule.forward does (see there)
            return checkpoint(functools.partial(self._forward, x, False), use_reentrant=False, early_stop=False)
        return self._forward(x, mode == "activation")

    def _forward(self, x: torch.Tensor, recompute_activation: bool) -> torch.Tensor:
        h = self.up(x)
        if recompute_activation:
            h = checkpoint(functools.partial(self.activation, h), use_reentrant=False, early_stop=False)
        else:
            h = self.activation(h)
        return self.down(h)

    def activation(self, h: torch.Tensor) -> torch.Tensor:
        if self.gated:
            gate, up = h.chunk(2, dim=-1)
            return F.silu(gate) * up
        return F.gelu(h)


class TransformerLayer(nn.Module):
    def __init__(
        self, spec: ModelSpec, *, flash: bool = False, recompute: str = "none", recompute_mlp: str = "none"
    ) -> None:
        super().__init__()
        self.post_norm = spec.post_norm
        self.norm1 = make_norm(spec)
        self.attention = Attention(spec, flash=flash, recompute=recompute)
        self.norm2 = make_norm(spec)
        self.mlp = MLP(spec, "none" if recompute == "full" else recompute_mlp)
        self.dropout = spec.hidden_dropout

    def forward(
        self, x: torch.Tensor, rotary: tuple[torch.Tensor, torch.Tensor] | None, mask: torch.Tensor | None
    ) -> torch.Tensor:
        if self.post_norm:  # BERT: residual, then norm
            x = self.norm1(x + dropout(self.attention(x, rotary, mask), self.dropout, self.training))
            return self.norm2(x + dropout(self.mlp(x), self.dropout, self.training))
        x = x + dropout(self.attention(self.norm1(x), rotary, mask), self.dropout, self.training)
        return x + dropout(self.mlp(self.norm2(x)), self.dropout, self.training)


# --------------------------------------------------------------------------------------------
# Embeddings (first stage)
# --------------------------------------------------------------------------------------------


class TokenEmbedding(nn.Module):
    """Vocab-parallel word embedding (+ learned positions, + token types, + norm as the model has
    them), output ``[s, b, h]`` — ``[s/tp, b, h]`` under sequence parallelism, where the word
    embedding's partial sums are reduce-scattered and positions/types looked up for the local
    slice of the sequence only."""

    def __init__(self, spec: ModelSpec, vocab: int) -> None:
        super().__init__()
        self.word = VocabParallelEmbedding(vocab, spec.hidden)
        self.position = _weight(spec.max_seq_len, spec.hidden) if spec.position == "learned" else None
        self.token_type = _weight(spec.type_vocab, spec.hidden) if spec.type_vocab else None
        self.norm = make_norm(spec) if spec.embedding_norm else None
        self.dropout = spec.hidden_dropout
        if sequence_parallel():
            for p in (self.position, self.token_type):
                if p is not None:
                    mark_sequence_parallel(p)

    def forward(self, ids: torch.Tensor, token_types: torch.Tensor | None = None) -> torch.Tensor:
        x = self.word(ids.t())  # ids [b, s] -> [s, b, h] (sequence first)
        local = x.shape[0]
        start = tp_rank() * local if sequence_parallel() else 0
        if self.position is not None:
            positions = torch.arange(start, start + local, device=ids.device)
            x = x + F.embedding(positions, self.position).unsqueeze(1)
        if self.token_type is not None:
            if token_types is None:
                raise ValueError("this model needs token type ids")
            x = x + F.embedding(token_types.t().narrow(0, start, local), self.token_type)
        if self.norm is not None:
            x = self.norm(x)
        return dropout(x, self.dropout, self.training)


class PatchEmbedding(nn.Module):
    """ViT: ``patch x patch`` convolution with stride ``patch``, class token, learned positions;
    images ``[b, c, H, W]`` -> ``[1 + patches, b, h]``."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.patch = spec.patch_size
        self.proj_weight = _weight(spec.hidden, spec.channels, spec.patch_size, spec.patch_size)
        self.proj_bias = nn.Parameter(torch.zeros(spec.hidden))
        self.cls = _weight(1, 1, spec.hidden)
        self.position = _weight(1, spec.max_seq_len, spec.hidden)
        self.dropout = spec.hidden_dropout

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = F.conv2d(images, self.proj_weight, self.proj_bias, stride=self.patch)  # [b, h, H/p, W/p]
        x = x.flatten(2).transpose(1, 2)  # [b, patches, h]
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.position
        return dropout(x.transpose(0, 1), self.dropout, self.training)


# --------------------------------------------------------------------------------------------
# Heads and losses (last stage)
# --------------------------------------------------------------------------------------------


class LMHead(nn.Module):
    """Final norm, column-parallel projection onto the vocabulary (the word embedding's own
    shard when tied), vocab-parallel cross entropy, mean over tokens."""

    def __init__(self, spec: ModelSpec, vocab: int, tied_weight: nn.Parameter | None) -> None:
        super().__init__()
        self.norm = make_norm(spec)
        if spec.tied_output:
            if tied_weight is None:  # a separate last stage: its copy of the first stage's embedding
                tied_weight = _weight(vocab // tp_size(), spec.hidden)
                tied_weight.shared_embedding = True  # type: ignore[attr-defined]  # a Megatron-style tag on the Parameter
                set_tensor_model_parallel_attributes(tied_weight, True, 0, 1, tp_size())
            self.weight = tied_weight
            self.output = None
        else:
            self.output = ColumnParallelLinear(spec.hidden, vocab, bias=False)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        x = self.norm(x)
        logits = self.output(x) if self.output is not None else column_parallel_linear(x, self.weight)
        return vocab_parallel_cross_entropy(logits, labels.t()).mean()


class BertHeads(nn.Module):
    """BertForPreTraining's heads: MLM (dense + GELU + LayerNorm, then the tied word embedding and
    a vocab-parallel bias, over all tokens; loss over the labelled ones) and NSP (pooler dense +
    tanh on the first token, 2-way classifier). Loss = MLM + NSP, as HF sums them."""

    def __init__(self, spec: ModelSpec, vocab: int, tied_weight: nn.Parameter | None) -> None:
        super().__init__()
        self.transform = Linear(spec.hidden, spec.hidden)
        _mark_sequence_parallel(self.transform)
        self.transform_norm = make_norm(spec)
        if tied_weight is None:
            tied_weight = _weight(vocab // tp_size(), spec.hidden)
            tied_weight.shared_embedding = True  # type: ignore[attr-defined]  # a Megatron-style tag on the Parameter
            set_tensor_model_parallel_attributes(tied_weight, True, 0, 1, tp_size())
        self.weight = tied_weight
        self.decoder_bias = nn.Parameter(torch.zeros(vocab // tp_size()))
        set_tensor_model_parallel_attributes(self.decoder_bias, True, 0, 1, tp_size())
        self.pooler = Linear(spec.hidden, spec.hidden)
        self.nsp = Linear(spec.hidden, 2)

    def forward(self, x: torch.Tensor, mlm_labels: torch.Tensor, nsp_labels: torch.Tensor) -> torch.Tensor:
        t = self.transform_norm(F.gelu(self.transform(x)))
        logits = column_parallel_linear(t, self.weight, self.decoder_bias)  # [s, b, V/tp]
        labels = mlm_labels.t()
        per_token = vocab_parallel_cross_entropy(logits, labels, ignore_index=IGNORE_INDEX)
        mlm = per_token.sum() / (labels != IGNORE_INDEX).sum().clamp(min=1)
        full = gather_from_sp_region(x, reduce_grad=False) if sequence_parallel() else x
        pooled = torch.tanh(self.pooler(full[0]))  # the [CLS] token, [b, h]
        nsp = F.cross_entropy(self.nsp(pooled).float(), nsp_labels)
        return mlm + nsp


class ClassifierHead(nn.Module):
    """ViT: final norm, linear classifier on the class token, cross entropy."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.norm = make_norm(spec)
        self.classifier = Linear(spec.hidden, spec.num_classes)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.classifier(self.norm(x)[0])
        return F.cross_entropy(logits.float(), labels)


# --------------------------------------------------------------------------------------------
# Pipeline stage
# --------------------------------------------------------------------------------------------


class StageModule(nn.Module):
    """The layers ``[pp_rank * L/pp, (pp_rank + 1) * L/pp)`` of one model, as one tensor-parallel
    rank holds them, with the embedding on the first stage and the head and loss on the last.

    ``forward(*inputs)``: the first stage takes the model inputs (token ids [+ token types] or
    images), the others the previous stage's activation ``[s, b, h]`` (``[s/tp, b, h]`` under
    sequence parallelism); the last stage also takes the labels and returns the scalar loss, the
    others return the activation for the next stage. Build with
    :func:`emulator.parallel.models.stage.build_stage`.
    """

    def __init__(
        self,
        spec: ModelSpec,
        *,
        seq_len: int,
        recompute: str = "none",
        recompute_mlp: str = "none",
        flash_attention: bool = False,
        vocab: int,
        parameters_total: int,
    ) -> None:
        super().__init__()
        if recompute not in RECOMPUTE:
            raise ValueError(f"recompute {recompute!r}: expected one of {', '.join(RECOMPUTE)}")
        state = comm.state()
        self.spec = spec
        self.seq_len = seq_len
        self.recompute = recompute
        self.flash_attention = flash_attention
        self.tp, self.pp, self.pp_rank = state.tp, state.pp, state.pp_rank
        self.sequence_parallel = sequence_parallel()
        self.first, self.last = state.first_stage, state.last_stage
        self.padded_vocab = vocab
        self.parameters_total = parameters_total  # full model, unsharded (MFU)
        per_stage = spec.layers // state.pp
        self.layer_range = range(state.pp_rank * per_stage, (state.pp_rank + 1) * per_stage)

        self.embedding: nn.Module | None = None
        if self.first:
            self.embedding = PatchEmbedding(spec) if spec.family == "vit" else TokenEmbedding(spec, vocab)
        self.layers = nn.ModuleDict(
            {
                str(i): TransformerLayer(spec, flash=flash_attention, recompute=recompute, recompute_mlp=recompute_mlp)
                for i in self.layer_range
            }
        )
        self.rotary = (
            RotaryEmbedding(spec.hidden // spec.heads, spec.rope_theta, spec.rope_scaling)
            if spec.position == "rope"
            else None
        )
        self.head: nn.Module | None = None
        if self.last:
            tied = self.embedding.word.weight if isinstance(self.embedding, TokenEmbedding) else None
            if spec.family == "vit":
                self.head = ClassifierHead(spec)
            elif spec.family == "bert":
                self.head = BertHeads(spec, vocab, tied)
            else:
                self.head = LMHead(spec, vocab, tied)

    @property
    def input_names(self) -> tuple[str, ...]:
        """What :meth:`forward` takes, in order."""
        if not self.first:
            names: tuple[str, ...] = ("hidden",)
        elif self.spec.family == "vit":
            names = ("images",)
        elif self.spec.family == "bert":
            names = ("input_ids", "token_type_ids")
        else:
            names = ("input_ids",)
        if self.last:
            if self.spec.family == "bert":
                names += ("mlm_labels", "nsp_labels")
            else:
                names += ("labels",)
        return names

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        names = self.input_names
        if len(inputs) != len(names):
            raise ValueError(f"stage {self.pp_rank} of {self.spec.name} takes {len(names)} inputs {names}")
        n_in = 1 if not self.first else (2 if self.spec.family == "bert" else 1)
        x = self.embedding(*inputs[:n_in]) if self.embedding is not None else inputs[0]
        seq = x.shape[0] * (self.tp if self.sequence_parallel else 1)  # attention sees the whole sequence
        rotary = self.rotary(seq, x.dtype) if self.rotary is not None else None
        mask = None
        if self.spec.causal and not self.flash_attention:  # True above the diagonal: keys after the query
            positions = torch.arange(seq, device=x.device)
            mask = positions.unsqueeze(0) > positions.unsqueeze(1)
        for layer in self.layers.values():
            if self.recompute == "full" and torch.is_grad_enabled():
                # Megatron's full recomputation: the whole layer forward runs again in backward
                # (early_stop=False: PyTorch would otherwise skip the trailing ops whose outputs
                # backward does not need, e.g. a layer's last matmul and all-reduce). Inputs reach
                # the layer through the closure, not as checkpoint arguments: checkpoint would look
                # up a ``torch.<device type>`` RNG module for them, which the emulated device
                # ("lazy") lacks; the CPU RNG (the one device tensors' dropout uses) is still
                # saved and restored for the recomputation.
                x = checkpoint(functools.partial(layer, x, rotary, mask), use_reentrant=False, early_stop=False)
            else:
                x = layer(x, rotary, mask)
        if self.head is None:
            return x
        return self.head(x, *inputs[n_in:])
