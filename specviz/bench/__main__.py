"""`python -m specviz.bench`: the benchmark's command line (specviz.bench.cli)."""

import sys

from .cli import main

sys.exit(main())
