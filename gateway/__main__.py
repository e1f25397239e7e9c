"""``python -m gateway`` is the ``cachegate`` command."""

import sys

from .cli import main

sys.exit(main())
