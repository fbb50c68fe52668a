"""python -m seedrl.service.cli"""

import sys

from seedrl.service.cli.main import main

sys.exit(main())
