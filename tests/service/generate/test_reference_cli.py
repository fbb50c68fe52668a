"""docs/reference/cli.md (service/generate/reference_cli.py): every seedrl command and option."""

from __future__ import annotations

import argparse

from seedrl.service.cli import main as cli
from seedrl.service.generate import reference_cli


def test_every_command_and_option_is_on_the_page():
    page = reference_cli.page()
    names = [name for name, _, _ in reference_cli.commands(cli.parser())]
    assert {
        "train",
        "validate",
        "submit",
        "status",
        "cost",
        "runs",
        "plot",
        "eval",
        "export",
    } <= set(names)
    for name, _, sub in reference_cli.commands(cli.parser()):
        assert f"## `seedrl {name}`\n" in page
        assert f"| `seedrl {name}` |" in page
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            for option in action.option_strings or [action.metavar or action.dest]:
                assert option in page, f"seedrl {name}: {option}"


def test_an_option_row_has_its_default_and_help():
    page = reference_cli.page()
    assert "| `--runs-dir RUNS_DIR` | `runs` | where run directories live |" in page
    assert "| `--episodes EPISODES` | `10` | episodes (default 10) |" in page
