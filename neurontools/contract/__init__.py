"""The daemon↔tools contract: what a daemon (emulated or a real host's source) hands the tools.

- ``inventory``: instance identity and ``HardwareInfo``, the only core↔device arithmetic;
- ``snapshot_models`` / ``snapshot``: the daemon's snapshot (``GET /v1/snapshot``, docs/snapshot.md),
  typed and validated once, with its schema version;
- ``names`` and ``schema``: engines, memory categories, ECC events and the report's key orders;
- ``percent``: the one share↔percent conversion; ``validation`` / ``json_values``: strict reading.

It imports no tool (ls, top, monitor, exporter), no emulator and no torch (``make lint``).
"""
