"""``python -m adapters.cli``: the ``policypal`` command."""

import sys

from adapters.cli import main

sys.exit(main())
