"""``python -m torch_tgb.cli`` is the ``tgb`` command."""

import sys

from torch_tgb.cli.main import main

sys.exit(main())
