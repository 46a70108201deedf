"""``python -m hubkernels.server`` moved: the local Hub runs as ``hubkernels serve``."""

import sys

sys.exit(
    "python -m hubkernels.server: error: run the local Hub with `hubkernels serve ...` "
    "(or `python -m hubkernels serve ...`), the same arguments"
)
