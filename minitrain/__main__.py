"""`python -m minitrain ...`: see minitrain/cli.py."""
import sys

from .cli import main

sys.exit(main())
