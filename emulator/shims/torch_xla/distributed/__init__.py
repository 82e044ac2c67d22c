"""torch_xla.distributed as neuron-emulator provides it (docs/run-your-script.md)."""
