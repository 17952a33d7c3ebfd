"""``python -m servatus``: the same CLI as the ``servatus`` command."""

import sys

from servatus.cli import main

sys.exit(main())
