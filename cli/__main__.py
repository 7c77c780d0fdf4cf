"""``python -m rlvr.cli``: the same as the ``rlvr-actor`` console script."""

import os
import sys

from rlvr.cli.main import main

if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
