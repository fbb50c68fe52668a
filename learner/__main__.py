"""python -m seedrl.learner"""

import sys

from seedrl.learner.main import main

sys.exit(main())
