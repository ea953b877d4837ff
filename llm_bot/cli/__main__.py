"""``python -m llm_bot.cli``: the same as the ``llm-bot`` script."""

import sys

from llm_bot.cli import main

sys.exit(main())
