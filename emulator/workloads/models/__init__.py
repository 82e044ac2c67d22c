"""Model definitions of the built-in workloads: plain ``nn.Module`` classes with config dataclasses."""
