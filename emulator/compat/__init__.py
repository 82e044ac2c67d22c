"""What the ``torch_xla``, ``torch_neuronx`` and ``neuronx_distributed`` packages of the emulator do.

Training scripts written for torch-neuronx import those packages; ``neuron-emulator exec`` puts
thin packages of those names (``emulator/shims/``) first on the import path, and each of their
modules re-exports a module of this package. Outside ``exec`` nothing here shadows a real
installation. What is provided, what is real and what is modelled: docs/run-your-script.md.
"""
