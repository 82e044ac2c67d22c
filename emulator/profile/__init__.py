"""The emulated runtime's profiler (docs/profiling.md): what ``NEURON_RT_INSPECT_*`` capture writes.

``session`` is the process's :class:`~emulator.profile.session.Profiler` (which captures are on:
the variables', the daemon's requests; what each wants), ``device`` the real-math executor's
records and system events, ``graphs`` turns a costed graph into its schedule file ("NEFF"),
``records`` an execution the daemon counted into a device-profile line, ``writer`` a process's
capture directory, ``chrome`` a window of the system trace as a Kineto-style Chrome trace. The
file formats are the contract's (``neurontools.contract.profile``), which ``neuron-profile``
reads. The runtime imports this package; this package does not import the runtime.
"""
