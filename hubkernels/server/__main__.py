"""``python -m hubkernels.server``: the ``hubkernels serve`` command, runnable without the main CLI."""

import sys

from .cli import main

sys.exit(main())
