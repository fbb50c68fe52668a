"""python -m seedrl.actors"""

import sys

from seedrl.actors.main import main

sys.exit(int(main()))
