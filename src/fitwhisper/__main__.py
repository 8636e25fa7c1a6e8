"""`python -m fitwhisper` is the `fitwhisper` command."""

import sys

from fitwhisper.cli import main

sys.exit(main())
