"""``docs/reference/exit-codes.md``, generated from :mod:`seedrl.common.exit_codes`: each code's
number, name, reason, meaning and what a restarter does with it (:data:`PERMANENT`,
:data:`RETRY_FREELY`), with the module's own account of the rule they follow.
"""

from __future__ import annotations

from seedrl.common import exit_codes
from seedrl.common.exit_codes import ExitCode
from seedrl.service.generate import markdown as md

#: The page, relative to the repository root.
PAGE = "docs/reference/exit-codes.md"


def restart(code: ExitCode) -> str:
    """What a restarter does with ``code``, as the module's groups (:data:`PERMANENT`,
    :data:`RETRY_FREELY`) declare it."""
    if code is ExitCode.OK:
        return "Done."
    if code is ExitCode.INTERRUPTED:
        return "`seedrl train`'s own code; nothing restarts it."
    if code in exit_codes.PERMANENT:
        return "Not restarted (`PERMANENT`)."
    if code in exit_codes.RETRY_FREELY:
        return "Restarted, not counted (`RETRY_FREELY`)."
    return "Restarted, counted against `spec.backoffLimit`."


def page() -> str:
    """The page's Markdown."""
    comments = md.attribute_comments(exit_codes, "ExitCode")
    rows = [
        (
            md.code(str(int(code))),
            md.code(code.name),
            md.code(code.reason),
            md.text(comments.get(code.name, code.description)),
            restart(code),
        )
        for code in ExitCode
    ]
    module = md.attribute_comments(exit_codes)
    rows.append(
        (
            md.code(str(exit_codes.SIGKILLED)),
            "(SIGKILL)",
            md.code(ExitCode.FAILED.reason),
            md.text(module["SIGKILLED"]),
            restart(ExitCode.FAILED),
        )
    )
    groups = "\n".join(
        f"- {md.code(name)} ({', '.join(md.code(c.name) for c in sorted(codes))}): "
        f"{md.text(module[name])}"
        for name, codes in (
            ("PERMANENT", exit_codes.PERMANENT),
            ("RETRY_FREELY", exit_codes.RETRY_FREELY),
        )
    )
    return "\n".join(
        [
            md.generated_line("`common/exit_codes.py`"),
            "# Exit codes\n",
            md.paragraphs(exit_codes.__doc__ or ""),
            md.table(("Code", "Name", "Reason", "Meaning", "Restart"), rows),
            "**Reason** is the CamelCase word the operator puts in an Experiment's conditions "
            "and events. The groups a restarter reads:\n",
            groups + "\n",
            "Any other code above 128 is a kill by signal (code − 128), counted as a crash.\n",
        ]
    )


def outputs() -> dict[str, str]:
    """The page and its text."""
    return {PAGE: page()}
