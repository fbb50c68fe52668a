"""python -m actors"""
import sys

from actors.main import main

sys.exit(main())
