"""``python -m qosched``: the ``qosched`` command, for an environment without its script on PATH."""

import sys

from qosched.cli.main import main

sys.exit(main())
