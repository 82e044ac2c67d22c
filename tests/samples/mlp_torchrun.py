"""Data-parallel MLP classifier: torchrun + init_process_group('xla') + MpDeviceLoader.

torchrun --nproc_per_node=2 mlp_torchrun.py --epochs 2
"""

import argparse
import os
import time

import torch
import torch.distributed as dist
import torch_xla.core.xla_model as xm
import torch_xla.distributed.parallel_loader as pl
import torch_xla.distributed.xla_backend  # noqa: F401  (registers the 'xla' process group)
import torch_xla.runtime as xr
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=2)
parser.add_argument("--batch_size", type=int, default=32)
parser.add_argument("--lr", type=float, default=0.05)
parser.add_argument("--train_until", default="", help="train more epochs until this file exists (a test's cue)")
args = parser.parse_args()

dist.init_process_group("xla")
device = xm.xla_device()
torch.manual_seed(0)

# a synthetic 10-class problem: 28x28 "images" labelled by a fixed random linear teacher
gen = torch.Generator().manual_seed(42)
images = torch.randn(2048, 784, generator=gen)
labels = (images @ torch.randn(784, 10, generator=gen)).argmax(dim=1)
dataset = TensorDataset(images, labels)
sampler = DistributedSampler(dataset, num_replicas=xr.world_size(), rank=xr.global_ordinal(), shuffle=True)
train_loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, drop_last=True)
train_device_loader = pl.MpDeviceLoader(train_loader, device)

model = torch.nn.Sequential(
    torch.nn.Linear(784, 128), torch.nn.ReLU(), torch.nn.Linear(128, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10)
).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()


def log(step, loss, epoch):
    xm.master_print(f"epoch {epoch} step {step} loss {loss.item():.4f}")


def more_epochs(epoch):
    """--epochs first; then, with --train_until, more until every rank sees the file."""
    if epoch < args.epochs or not args.train_until:
        return epoch < args.epochs
    return not xm.mesh_reduce(f"until{epoch}", os.path.exists(args.train_until), all)


start = time.time()
epoch = 0
while more_epochs(epoch):
    sampler.set_epoch(epoch)
    model.train()
    for step, (data, target) in enumerate(train_device_loader):
        optimizer.zero_grad()
        loss = loss_fn(model(data), target)
        loss.backward()
        xm.optimizer_step(optimizer)
        if step % 10 == 0:
            xm.add_step_closure(log, args=(step, loss, epoch))
    epoch += 1

correct = torch.tensor(0, device=device)
with torch.no_grad():
    for data, target in pl.MpDeviceLoader(DataLoader(dataset, batch_size=256), device):
        correct += (model(data).argmax(dim=1) == target).sum()
accuracy = xm.mesh_reduce("accuracy", correct.item() / len(dataset), lambda values: sum(values) / len(values))
xm.master_print(f"accuracy {accuracy:.4f} world {xr.world_size()} in {time.time() - start:.1f} s")
xm.rendezvous("done")
