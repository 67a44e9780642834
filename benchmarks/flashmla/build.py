"""Build FlashMLA's dense decode now (verbosely, timed) from $DCPCTL_FLASHMLA_SDIST + $DCPCTL_FLASHINFER_SDIST.

    python3 benchmarks/flashmla/build.py      (otherwise the first decode step that wants FlashMLA builds it)
"""
from dcpctl.runtime.attention.flashmla_setup import main

raise SystemExit(main())
