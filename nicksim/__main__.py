"""`python -m nicksim` is the `nicksim` command."""
import sys

from .cli import main

sys.exit(main())
