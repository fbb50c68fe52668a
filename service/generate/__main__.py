"""``python -m seedrl.service.generate [--write | --check] [--root DIR]``: every generated file."""

import sys

from seedrl.service import generate

sys.exit(
    generate.main("python -m seedrl.service.generate", __doc__.splitlines()[0], generate.outputs)
)
