"""``python -m support.operator_replica [ARGS]``: the operator's own ``main`` (``python -m
seedrl.service.operator ARGS``), except that it reads each learner's ``/status`` from the test's
status server on ``$SEEDRL_TEST_LEARNER_STATUS_PORT`` instead of the learner's Service, which
nothing routes in the tests' cluster (see :class:`support.operator_faults.OperatorReplica`)."""

from __future__ import annotations

import functools
import os
import sys

from seedrl.service.operator import handlers


def main(argv: list[str]) -> int:
    """Runs ``handlers.main(argv)`` with the learners' status served by the test."""
    port = int(os.environ["SEEDRL_TEST_LEARNER_STATUS_PORT"])

    def learner_url(namespace: str, name: str, _metrics_port: int) -> str:
        return f"http://127.0.0.1:{port}/{namespace}/{name}/status"

    # main() builds its OperatorConfig by this name: the one difference from production.
    config = functools.partial(handlers.OperatorConfig, status_url=learner_url)
    setattr(handlers, "OperatorConfig", config)  # noqa: B010 - a module's global, on purpose
    return handlers.main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
