"""neuron-top: a full-screen view of NeuronCore, vCPU and memory usage (docs/reference/neuron-top.md).

Data flows one way: a source (the emulator daemon, or neuron-monitor reports on stdin) ->
``sampler`` (in a worker thread: reports -> immutable ``model.Sample``) -> ``view`` (the selected
tab's figures) -> widgets. Missing values are ``None`` and are shown as ``NA``.
"""
