"""``python -m workers.emulator``: the same as ``kvroute emulate``."""

import sys

from workers.emulator.cli import main

sys.exit(main())
