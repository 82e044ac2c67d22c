"""Hugging Face ``Trainer`` on ``xla``, data parallel over torchrun: a tiny GPT-2 built from a
config (no download) trained on generated sequences, as the samples' ``run_glue.py`` and
``run_clm.py`` drive the Trainer on a Trn1.

    torchrun --nproc_per_node=2 hf_trainer_xla.py --output_dir /tmp/out --max_steps 8
"""

import argparse

import torch
from torch.utils.data import Dataset
from transformers import AutoModelForCausalLM, GPT2Config, Trainer, TrainerCallback, TrainingArguments, set_seed

parser = argparse.ArgumentParser()
parser.add_argument("--output_dir", default="output")
parser.add_argument("--max_steps", type=int, default=8)
args = parser.parse_args()


class Counting(Dataset):
    """Sequences counting up from a random start (mod 256): structure the model can learn."""

    def __init__(self, n: int) -> None:
        gen = torch.Generator().manual_seed(1234)
        self.ids = (torch.randint(0, 256, (n, 1), generator=gen) + torch.arange(32)) % 256

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class PrintLoss(TrainerCallback):
    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and logs and "loss" in logs:
            print(f"step {state.global_step} loss {logs['loss']:.4f}", flush=True)


set_seed(0)
model = AutoModelForCausalLM.from_config(GPT2Config(vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=4))
training = TrainingArguments(
    output_dir=args.output_dir,
    per_device_train_batch_size=8,
    max_steps=args.max_steps,
    learning_rate=3e-3,
    optim="adamw_torch",  # transformers' default for torch >= 2.8, the fused AdamW, has no kernel for xla
    logging_steps=1,
    save_strategy="no",
    report_to=[],
    dataloader_drop_last=True,
)
trainer = Trainer(model=model, args=training, train_dataset=Counting(256), callbacks=[PrintLoss()])
result = trainer.train()
checksum = sum(float(p.detach().double().sum()) for p in trainer.model.parameters())
print(
    f"rank {trainer.args.process_index} of {trainer.args.world_size} on {trainer.args.device} weights {checksum:.6f}",
    flush=True,
)
if trainer.is_world_process_zero():
    print(f"train_loss {result.training_loss:.4f}", flush=True)
