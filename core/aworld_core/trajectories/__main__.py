"""``python -m aworld_core.trajectories``: see ``aworld_core.trajectories.cli``."""

import sys

from aworld_core.trajectories.cli import main

sys.exit(main())
