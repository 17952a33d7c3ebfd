"""``python -m servatus``: the same CLI as the ``servatus`` command."""

import sys

from servatus.cli import console

sys.exit(console())
