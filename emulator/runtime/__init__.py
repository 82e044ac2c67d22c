"""The emulated Neuron runtime inside a training process: attach, core claims, errors."""
