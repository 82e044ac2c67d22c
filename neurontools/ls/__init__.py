"""neuron-ls: list Neuron devices and the processes holding them (docs/reference/neuron-ls.md).

``table`` draws the bordered tables, ``topology`` the device torus diagram and ``render`` turns an
:class:`neurontools.contract.inventory.Inventory` into the exact text or JSON neuron-ls prints.
"""
