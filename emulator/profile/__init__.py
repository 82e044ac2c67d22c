"""The emulated runtime's profiler (docs/profiling.md): what ``NEURON_RT_INSPECT_*`` capture writes.

``graphs`` turns a costed graph into its schedule file ("NEFF"), ``records`` an execution the
daemon counted into a device-profile line, ``writer`` a process's capture directory. The file
formats are the contract's (``neurontools.contract.profile``), which ``neuron-profile`` reads.
"""
