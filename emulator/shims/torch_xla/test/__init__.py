"""torch_xla.test as neuron-emulator provides it (docs/run-your-script.md)."""
