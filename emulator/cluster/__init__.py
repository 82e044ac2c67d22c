"""An emulated Trn1 cluster: N nodes, each a daemon and a neuron-exporter of its own, all served by
one "cluster host" process (docs/cluster.md).

* ``layout``: where a cluster's files live (state, lock, sockets, Prometheus targets, log).
* ``nodes``: the nodes' identities (one instance id each, one region/AZ/subnet/placement group).
* ``state``: the state file and the Prometheus ``file_sd`` target file.
* ``host``: the process that serves every node's daemon and exporter.
* ``cli``: ``neuron-emulator cluster up|status|down``.
"""
