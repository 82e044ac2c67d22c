"""neuron-top's widgets: each draws one section of the screen from the current ``Sample``."""
