"""torch_xla.distributed.spmd as neuron-emulator provides it: importable (Hugging Face's Trainer
imports it whenever torch_xla is present), every name raises ``NotEmulatedError`` — SPMD sharding
(one process driving many NeuronCores) is not emulated: one process per NeuronCore
(docs/run-your-script.md)."""

from emulator.compat.gaps import not_emulated

__getattr__ = not_emulated(__name__)
