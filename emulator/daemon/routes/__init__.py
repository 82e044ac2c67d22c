"""The daemon's HTTP resources, one router each (``emulator/daemon/app.py`` puts them together):
``status`` (status, inventory, snapshot), ``processes`` (attach, detach, list), ``executions``
(execution reports, memory, job steps) and ``faults``. Each reads the daemon's parts from one
``Daemon`` (``context.py``)."""
