"""`python -m specviz.lossless`: see specviz/lossless/cli.py."""

import sys

from .cli import main

sys.exit(main())
