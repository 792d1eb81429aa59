"""``python -m kinetic_core.cli``: the same as the ``kinetic`` command."""

import sys

from kinetic_core.cli import main

sys.exit(main())
