"""neuron-top: a full-screen view of NeuronCore, vCPU and memory usage (docs/reference/neuron-top.md).

Data flows one way: a source (the emulator daemon's snapshots, each pair a ``Period`` mapped by
``period_sample``; or neuron-monitor reports on stdin, mapped by ``report_sample``) -> ``sampler``
(in a worker thread: immutable ``model.Sample`` objects with their history) -> ``view`` (the
selected tab's figures) -> widgets. Missing values are ``None`` and are shown as ``NA``.
"""
