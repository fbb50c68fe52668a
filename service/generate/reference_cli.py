"""``docs/reference/cli.md``, generated from the ``seedrl`` command line's own argparse parser
(:func:`seedrl.service.cli.main.parser`): every command, its usage, and each argument with its
default and help, so that the page says what ``seedrl COMMAND --help`` says.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator

from seedrl.service.cli import main as cli
from seedrl.service.generate import markdown as md

#: The page, relative to the repository root.
PAGE = "docs/reference/cli.md"
# Usage lines are wrapped at this width whatever the terminal that runs the generator, so
# that the page does not change with $COLUMNS.
_USAGE_WIDTH = 100


def commands(
    parser: argparse.ArgumentParser, prefix: str = ""
) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """``(command, one-line help, its parser)`` of every subcommand under ``parser``, nested
    ones (``seedrl a b``) after their parent, in the order they were added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield f"{prefix}{name}", helps.get(name, ""), sub
                yield from commands(sub, f"{prefix}{name} ")


def _usage(parser: argparse.ArgumentParser) -> str:
    formatter = argparse.HelpFormatter(parser.prog, width=_USAGE_WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _name(action: argparse.Action) -> str:
    if action.option_strings:
        names = ", ".join(action.option_strings)
        if action.nargs == 0:
            return md.code(names)
        metavar = action.metavar or action.dest.upper()
        return md.code(f"{names} {metavar}")
    return md.code(str(action.metavar or action.dest))


def _default(action: argparse.Action) -> str:
    # Flags default to False and appended lists to []: saying so adds nothing.
    if action.nargs == 0 or action.default in (None, [], argparse.SUPPRESS):
        return ""
    return md.code(str(action.default))


def _repeat(action: argparse.Action) -> str:
    if action.required and action.option_strings:
        return " (required)"
    if not action.option_strings and action.nargs in ("?", "*"):
        return " (optional)"
    return ""


def arguments_table(parser: argparse.ArgumentParser) -> str:
    """A table of the parser's own arguments (``--help`` and subcommands left out)."""
    rows = [
        (_name(a), _default(a), md.text((a.help or "") % vars(a)) + _repeat(a))
        for a in parser._actions
        if not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
        and a.help != argparse.SUPPRESS
    ]
    return md.table(("Argument", "Default", "Description"), rows) if rows else ""


def page() -> str:
    """The page's Markdown."""
    top = cli.parser()
    index = md.table(
        ("Command", "What it does"),
        [(md.code(f"seedrl {name}"), md.text(help_)) for name, help_, _ in commands(top)],
    )
    out = [
        md.generated_line("the argparse parser of `service/cli/main.py`"),
        "# The seedrl command\n",
        md.text(top.description or "") + "\n",
        "`seedrl COMMAND --help` prints what this page says of each command.\n",
        index,
    ]
    for name, help_, sub in commands(top):
        out.append(f"## `seedrl {name}`\n")
        out.append(md.text(sub.description or help_) + "\n")
        out.append(f"```\n{_usage(sub)}\n```\n")
        out.append(arguments_table(sub))
    return "\n".join(out)


def outputs() -> dict[str, str]:
    """The page and its text."""
    return {PAGE: page()}
