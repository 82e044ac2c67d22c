"""neuron-ls: list Neuron devices and the processes holding them (spec/neuron-tools.md §1).

``table`` draws the bordered tables, ``topology`` the device torus diagram and ``render`` turns an
:class:`neurontools.inventory.Inventory` into the exact text or JSON neuron-ls prints.
"""
