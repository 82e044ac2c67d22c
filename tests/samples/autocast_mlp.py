"""An MLP classifier trained under torch_xla's autocast (BF16 matrix products, FP32 softmax and
loss) on one NeuronCore, as the samples' ``--enable_pt_autocast`` runs do.

    python autocast_mlp.py --steps 20
"""

import argparse

import torch
import torch_xla.amp
import torch_xla.core.xla_model as xm

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=20)
args = parser.parse_args()

device = xm.xla_device()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to(device)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
gen = torch.Generator().manual_seed(1)
x = torch.randn(256, 32, generator=gen)
y = (x[:, :4].argmax(dim=1)).to(device)  # a class the first features decide
x = x.to(device)
for step in range(args.steps):
    optimizer.zero_grad()
    with torch_xla.amp.autocast(device):
        logits = model(x)
        probs = torch.softmax(logits, dim=-1)
        loss = torch.nn.functional.nll_loss(torch.log(probs), y)
    loss.backward()
    optimizer.step()
    xm.mark_step()
    if step in (0, args.steps - 1):
        print(f"step {step} loss {loss.item():.4f}", flush=True)
print(f"dtypes logits {logits.dtype} softmax {probs.dtype} loss {loss.dtype} weight {model[0].weight.dtype}")
