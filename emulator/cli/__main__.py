"""``python -m emulator.cli``: the ``neuron-emulator`` command (a detached daemon or cluster host runs so)."""

import sys

from emulator.cli import main

sys.exit(main())
