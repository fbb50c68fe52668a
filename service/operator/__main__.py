"""python -m seedrl.service.operator"""

import sys

from seedrl.service.operator.handlers import main

sys.exit(main())
