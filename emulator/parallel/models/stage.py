"""One pipeline stage of a model-scale model, built for this rank's tensor-/pipeline-parallel
place (:func:`emulator.parallel.comm.state`), and one micro-batch of its inputs::

    set_communicator(RecordingCommunicator(RankGrid(tp=8, pp=4).state_at(pp=1, sequence_parallel=True)))
    stage = build_stage(MODELS["gpt3-6.7b"], seq_len=2048, recompute="selective", flash_attention=True)
    loss_or_activation = stage(*stage_inputs(MODELS["gpt3-6.7b"], stage, micro_batch=1, seq_len=2048))

Layers split evenly over the pipeline stages; the first stage also holds the embedding, the last
the final norm, head and loss. The models' table is :mod:`emulator.workloads.models.zoo`;
``docs/models.md`` has the sources and the tensor-parallel layout.
"""

from __future__ import annotations

import torch

from emulator.parallel import comm
from emulator.parallel.models.transformer import StageModule
from emulator.workloads.models.zoo import ModelSpec, count_parameters, padded_vocab, validate


def build_stage(
    spec: ModelSpec,
    *,
    seq_len: int,
    recompute: str = "none",
    recompute_mlp: str = "none",
    flash_attention: bool = False,
    device: str | torch.device = "meta",
) -> StageModule:
    """This rank's pipeline stage of ``spec`` (tp, pp, pp_rank, sequence_parallel from
    :func:`emulator.parallel.comm.state`), built on ``device`` — ``meta`` for model-scale work:
    no memory and no initialisation whatever the size. ``recompute``: ``full`` checkpoints every
    transformer layer (its forward runs again in backward), ``selective`` only each attention core
    (``recompute_mlp``: and the MLP's activation, or the whole MLP);
    ``flash_attention``: the attention core as one fused kernel each way."""
    state = comm.state()
    validate(spec, state.tp, state.pp, seq_len, sequence_parallel=state.sequence_parallel)
    if not 0 <= state.pp_rank < state.pp:
        raise ValueError(f"{spec.name}: pipeline rank {state.pp_rank} is outside 0..{state.pp - 1}")
    if not 0 <= state.tp_rank < state.tp:
        raise ValueError(f"{spec.name}: tensor-parallel rank {state.tp_rank} is outside 0..{state.tp - 1}")
    with torch.device(device):
        return StageModule(
            spec,
            seq_len=seq_len,
            recompute=recompute,
            recompute_mlp=recompute_mlp,
            flash_attention=flash_attention,
            vocab=padded_vocab(spec, state.tp),
            parameters_total=count_parameters(spec, state.tp),
        )


def stage_inputs(
    spec: ModelSpec, module: StageModule, micro_batch: int, seq_len: int, *, device: str | torch.device = "meta"
) -> tuple[torch.Tensor, ...]:
    """One micro-batch of ``module``'s inputs, in :attr:`StageModule.input_names` order: token ids
    ``[b, s]`` (+ token types) or images ``[b, c, H, W]`` on the first stage, the activation
    ``[s, b, h]`` (``[s/tp, b, h]`` under sequence parallelism, ``requires_grad``) on the
    others; labels on the last (``[b, s]`` tokens, BERT: + NSP ``[b]``, ViT: ``[b]``).
    Random values when ``device`` is not ``meta``."""
    meta = torch.device(device).type == "meta"
    vocab = max(spec.vocab, 1)

    def ids(*shape: int, high: int) -> torch.Tensor:
        if meta:
            return torch.empty(*shape, dtype=torch.long, device=device)
        return torch.randint(0, high, shape, device=device)

    def floats(*shape: int) -> torch.Tensor:
        return torch.empty(*shape, device=device) if meta else torch.randn(*shape, device=device)

    inputs: list[torch.Tensor] = []
    if not module.first:
        local = seq_len // module.tp if module.sequence_parallel else seq_len
        inputs.append(floats(local, micro_batch, spec.hidden).requires_grad_())
    elif spec.family == "vit":
        inputs.append(floats(micro_batch, spec.channels, spec.image_size, spec.image_size))
    else:
        inputs.append(ids(micro_batch, seq_len, high=vocab))
        if spec.family == "bert":
            inputs.append(ids(micro_batch, seq_len, high=spec.type_vocab))
    if module.last:
        if spec.family == "vit":
            inputs.append(ids(micro_batch, high=spec.num_classes))
        else:
            inputs.append(ids(micro_batch, seq_len, high=vocab))
            if spec.family == "bert":
                inputs.append(ids(micro_batch, high=2))
    return tuple(inputs)
