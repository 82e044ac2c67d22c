"""Tensor parallel (neuronx-distributed) language model head over an MLP block:
ParallelEmbedding -> ColumnParallelLinear -> RowParallelLinear -> ColumnParallelLinear head,
parallel_cross_entropy, TP over every rank of the job.

    torchrun --nproc_per_node=2 nxd_tp_mlp.py --tensor_parallel_size 2
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm
from neuronx_distributed.parallel_layers import checkpointing, grads, move_model_to_device, parallel_state
from neuronx_distributed.parallel_layers.layers import ColumnParallelLinear, ParallelEmbedding, RowParallelLinear
from neuronx_distributed.parallel_layers.loss_functions import parallel_cross_entropy

parser = argparse.ArgumentParser()
parser.add_argument("--tensor_parallel_size", type=int, default=2)
parser.add_argument("--steps", type=int, default=30)
parser.add_argument("--vocab", type=int, default=1024)
parser.add_argument("--hidden", type=int, default=256)
parser.add_argument("--bias", type=int, default=1)
parser.add_argument("--output_dir", default="", help="save a sharded checkpoint here, then load it back")
parser.add_argument("--stay_until", default="", help="stay attached after training until this file exists")
args = parser.parse_args()


class Model(torch.nn.Module):
    def __init__(self, vocab, hidden, bias):
        super().__init__()
        self.embed = ParallelEmbedding(vocab, hidden)
        self.up = ColumnParallelLinear(hidden, 4 * hidden, bias=bias, gather_output=False)
        self.down = RowParallelLinear(4 * hidden, hidden, bias=bias, input_is_parallel=True)
        self.lm_head = ColumnParallelLinear(hidden, vocab, bias=False, gather_output=False)

    def forward(self, ids):
        h = self.embed(ids)
        h = h + self.down(torch.nn.functional.gelu(self.up(h)))
        return self.lm_head(h)


dist.init_process_group("xla")
parallel_state.initialize_model_parallel(tensor_model_parallel_size=args.tensor_parallel_size)
torch.manual_seed(0)
device = xm.xla_device()
model = Model(args.vocab, args.hidden, bool(args.bias))
move_model_to_device(model, device)
optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

gen = torch.Generator().manual_seed(5)
losses = []
for _ in range(args.steps):
    ids = torch.randint(0, args.vocab, (8, 65), generator=gen)
    ids[:, 1:] = (ids[:, :1] * 7 + torch.arange(1, 65)) % args.vocab  # each sequence follows its first token
    inputs, labels = ids[:, :-1].to(device), ids[:, 1:].to(device)
    optimizer.zero_grad()
    loss = parallel_cross_entropy(model(inputs), labels).mean()
    loss.backward()
    grads.clip_grad_norm(model.parameters(), 1.0)
    optimizer.step()
    xm.mark_step()
    losses.append(loss.item())

if args.output_dir:
    checkpointing.save({"model": model.state_dict(), "step": args.steps}, args.output_dir)
    restored = checkpointing.load(args.output_dir, model)
    assert restored == {"step": args.steps}, restored

shapes = {name: list(p.shape) for name, p in model.named_parameters()}
xm.master_print(
    json.dumps(
        {
            "tp_size": parallel_state.get_tensor_model_parallel_size(),
            "dp_size": parallel_state.get_data_parallel_size(),
            "first_loss": losses[0],
            "last_loss": losses[-1],
            "shapes": shapes,
            "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
            "tensor_parallel": all(
                getattr(p, "tensor_model_parallel", False) for n, p in model.named_parameters() if "weight" in n
            ),
        }
    )
)
while args.stay_until and not os.path.exists(args.stay_until):
    time.sleep(0.1)
xm.rendezvous("done")
