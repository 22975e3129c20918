"""``python -m tiermem`` runs the CLI (``entry`` sends hooks the fast way)."""

import sys

from .cli import main

sys.exit(main())
