"""Three training steps annotated with torch_xla.debug.profiler, traced into the log directory
given as the only argument (tests/test_profile_capture.py; docs/profiling.md)."""

import sys

import torch
import torch_xla.core.xla_model as xm
import torch_xla.debug.profiler as xp


def main() -> None:
    device = xm.xla_device()
    server = xp.start_server(9012)
    assert server is not None
    model = torch.nn.Linear(32, 32).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    xp.start_trace(sys.argv[1])
    for step in range(3):
        with xp.StepTrace("train_step", step_num=step):
            with xp.Trace("forward"):
                loss = model(torch.randn(4, 32).to(device)).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    xp.stop_trace()
    print(f"loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
