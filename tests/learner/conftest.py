"""Fixtures of the learner tests."""

from support.learner_harness import learner  # noqa: F401 - a fixture
