"""The emulator daemon: device truth (inventory, core ownership, processes) served over HTTP."""
