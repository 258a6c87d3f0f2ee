"""`python -m benchmarks`: see `benchmarks.runner`."""

import sys

from benchmarks.runner import main

sys.exit(main())
