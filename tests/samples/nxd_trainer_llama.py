"""A tiny Llama-shaped decoder trained through neuronx-distributed's trainer API, as the NxD Llama
examples drive it: ``neuronx_distributed_config`` (tensor parallelism with sequence parallelism,
ZeRO-1 with FP32 master weights and FP32 gradient accumulation, the attention core checkpointed),
``initialize_parallel_model`` with a ``param_init_fn``, ``initialize_parallel_optimizer``, gradient
accumulation over micro-batches, and ``nxd.save_checkpoint``/``load_checkpoint``.

    torchrun --nproc_per_node=4 nxd_trainer_llama.py --tensor_parallel_size 2
    torchrun --nproc_per_node=1 nxd_trainer_llama.py --tensor_parallel_size 1 --zero1 0 --sequence_parallel 0

Prints ``loss X`` per step and, per rank, ``rank R optimizer-state elements N grad-norm G``.
"""

import argparse
import math
import os
import time

import neuronx_distributed as nxd
import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm
from neuronx_distributed.modules.qkv_linear import GQAQKVColumnParallelLinear
from neuronx_distributed.parallel_layers import mappings, parallel_state
from neuronx_distributed.parallel_layers.layers import ColumnParallelLinear, ParallelEmbedding, RowParallelLinear
from neuronx_distributed.parallel_layers.loss_functions import parallel_cross_entropy

parser = argparse.ArgumentParser()
parser.add_argument("--tensor_parallel_size", type=int, default=2)
parser.add_argument("--sequence_parallel", type=int, default=1)
parser.add_argument("--zero1", type=int, default=1)
parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--grad_accum_usteps", type=int, default=2)
parser.add_argument("--global_batch", type=int, default=8)
parser.add_argument("--ckpt", default="", help="save a trainer checkpoint here at the end and load it back")
parser.add_argument("--stay_until", default="", help="stay attached after training until this file exists")
parser.add_argument("--qkv", default="gqa", choices=["gqa", "fused", "separate"], help="how Q, K, V are projected")
args = parser.parse_args()

VOCAB, HIDDEN, HEADS, FFN, LAYERS, SEQ = 128, 64, 4, 128, 2, 16
DTYPE = torch.bfloat16 if args.dtype == "bf16" else torch.float32
SP = bool(args.sequence_parallel)


class RMSNorm(torch.nn.Module):
    def __init__(self, size):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(size, dtype=DTYPE))
        self.weight.sequence_parallel_enabled = SP  # its gradient is partial per sequence slice

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * self.weight


class CoreAttention(torch.nn.Module):
    def forward(self, q, k, v):  # [batch, heads, seq, dim]
        scores = q @ k.transpose(-1, -2) / math.sqrt(q.size(-1))
        mask = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool, device=q.device).triu(1)
        return torch.softmax(scores.masked_fill(mask, -1e4).float(), dim=-1).to(q.dtype) @ v


class DecoderLayer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        tp = parallel_state.get_tensor_model_parallel_size()
        self.heads = HEADS // tp
        common = {"bias": False, "dtype": DTYPE, "sequence_parallel_enabled": SP}
        self.input_norm = RMSNorm(HIDDEN)
        # Q, K, V as the NxD Llama projects them: NxD's GQA QKV layer, one fused layer split with
        # stride 3 (each rank its heads of all three), or one layer each; every rank whole heads
        if args.qkv == "gqa":
            self.qkv = GQAQKVColumnParallelLinear(HIDDEN, [HIDDEN, HIDDEN], gather_output=False, **common)
        elif args.qkv == "fused":
            self.qkv = ColumnParallelLinear(HIDDEN, 3 * HIDDEN, gather_output=False, stride=3, **common)
        else:
            self.q_proj, self.k_proj, self.v_proj = (
                ColumnParallelLinear(HIDDEN, HIDDEN, gather_output=False, **common) for _ in range(3)
            )
        self.attn = CoreAttention()
        self.o_proj = RowParallelLinear(HIDDEN, HIDDEN, input_is_parallel=True, **common)
        self.post_norm = RMSNorm(HIDDEN)
        self.gate = ColumnParallelLinear(HIDDEN, FFN, gather_output=False, **common)
        self.up = ColumnParallelLinear(HIDDEN, FFN, gather_output=False, **common)
        self.down = RowParallelLinear(FFN, HIDDEN, input_is_parallel=True, **common)

    def forward(self, x):  # [seq (a slice of it under SP), batch, hidden]
        h = self.input_norm(x)
        if args.qkv == "gqa":
            q, k, v = self.qkv(h)
        elif args.qkv == "fused":
            q, k, v = self.qkv(h).chunk(3, dim=-1)
        else:
            q, k, v = self.q_proj(h), self.k_proj(h), self.v_proj(h)
        seq, batch = q.shape[:2]
        q, k, v = (t.reshape(seq, batch, self.heads, -1).permute(1, 2, 0, 3) for t in (q, k, v))
        out = self.attn(q, k, v).permute(2, 0, 1, 3).reshape(seq, batch, -1)
        x = x + self.o_proj(out)
        h = self.post_norm(x)
        return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h))


class TinyLlama(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = ParallelEmbedding(VOCAB, HIDDEN, dtype=DTYPE)
        self.layers = torch.nn.ModuleList(DecoderLayer() for _ in range(LAYERS))
        self.norm = RMSNorm(HIDDEN)
        self.lm_head = ColumnParallelLinear(
            HIDDEN, VOCAB, bias=False, gather_output=False, dtype=DTYPE, sequence_parallel_enabled=SP
        )

    def forward(self, ids, labels):
        h = self.embed(ids).transpose(0, 1).contiguous()  # [seq, batch, hidden], as the NxD Llama does
        if SP:
            h = mappings.scatter_to_sequence_parallel_region(h)
        for layer in self.layers:
            h = layer(h)
        logits = self.lm_head(self.norm(h)).transpose(0, 1).float()  # [batch, seq, vocab/tp]
        return parallel_cross_entropy(logits, labels).mean()


def init_weights(module, device):
    """As the NxD Llama example's param_init_fn: norms to one, parallel layers re-initialised."""
    if isinstance(module, RMSNorm):
        module.weight.data.fill_(1.0)
    elif isinstance(module, GQAQKVColumnParallelLinear):
        module.initialize_weight_biases()
    elif isinstance(module, (ParallelEmbedding, ColumnParallelLinear, RowParallelLinear)):
        module.init_weight_cpu()


dist.init_process_group("xla")
config = nxd.neuronx_distributed_config(
    tensor_parallel_size=args.tensor_parallel_size,
    optimizer_config={"zero_one_enabled": bool(args.zero1), "grad_clipping": True, "max_grad_norm": 1.0},
    sequence_parallel=SP,
    activation_checkpoint_config=CoreAttention,
    model_init_config={"meta_device_init": True, "param_init_fn": init_weights},
    mixed_precision_config={"use_master_weights": bool(args.zero1), "use_fp32_grad_acc": bool(args.zero1)},
)
torch.manual_seed(0)  # the same full weights on every rank (each keeps its slice)
model = nxd.initialize_parallel_model(config, TinyLlama)
optimizer = nxd.initialize_parallel_optimizer(config, torch.optim.AdamW, model.parameters(), lr=5e-3)

dp, dp_rank = parallel_state.get_data_parallel_size(), parallel_state.get_data_parallel_rank()
micro = args.global_batch // (dp * args.grad_accum_usteps)
device = xm.xla_device()
gen = torch.Generator().manual_seed(7)
for step in range(args.steps):
    ids = torch.randint(0, VOCAB, (args.global_batch, 1), generator=gen)
    seqs = (ids * 7 + torch.arange(SEQ + 1) * 3) % VOCAB  # each next token follows from the one before
    mine = seqs[dp_rank * micro * args.grad_accum_usteps : (dp_rank + 1) * micro * args.grad_accum_usteps]
    total = torch.zeros((), device=device)
    for u in range(args.grad_accum_usteps):
        batch = mine[u * micro : (u + 1) * micro]
        loss = model(batch[:, :-1].to(device), batch[:, 1:].to(device)) / args.grad_accum_usteps
        loss.backward()
        total += loss.detach()
    xm.mark_step()  # as the NxD examples: the backward graph ends here, the optimizer is its own
    optimizer.step()
    optimizer.zero_grad()
    xm.mark_step()
    mean = xm.all_reduce(xm.REDUCE_SUM, total / dp, groups=parallel_state.get_data_parallel_replica_groups())
    xm.master_print(f"step {step} loss {mean.item():.6f}")

if args.ckpt:
    nxd.save_checkpoint(args.ckpt, "step_final", model, optimizer, user_content={"step": args.steps}, use_xser=True)
    before = {k: v.detach().float().cpu().clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
    content = nxd.load_checkpoint(args.ckpt, model=model, optimizer=optimizer)
    after = {k: v.detach().float().cpu() for k, v in model.state_dict().items()}
    same = all(torch.equal(before[k], after[k]) for k in before) and content == {"step": args.steps}
    xm.master_print(f"checkpoint restored {same} has_checkpoint {nxd.has_checkpoint(args.ckpt)}")

inner = getattr(optimizer.optimizer, "base_optimizer", None) or optimizer.optimizer
state = [t for s in inner.state.values() for t in s.values() if torch.is_tensor(t) and t.dim() > 0]
elements = sum(t.numel() for t in state)
# on the device: the moments, and with ZeRO-1 the FP32 master shards the moments belong to
held = sum(t.nbytes for t in state) + (
    sum(p.nbytes for g in inner.param_groups for p in g["params"]) if args.zero1 else 0
)
local = sum(p.numel() for p in model.parameters())  # this rank's TP shard of the model
norm = float(optimizer.grad_norm) if optimizer.grad_norm is not None else float("nan")
print(f"rank {dist.get_rank()} optimizer-state elements {elements} grad-norm {norm:.6f}", flush=True)
print(f"rank {dist.get_rank()} optimizer bytes {held} model elements {local}", flush=True)
while args.stay_until and not os.path.exists(args.stay_until):
    time.sleep(0.1)
xm.rendezvous("done")
