"""docs/reference/exit-codes.md (service/generate/reference_exit_codes.py): every exit code, with
its meaning and what a restarter does with it."""

from __future__ import annotations

from seedrl.common import exit_codes
from seedrl.common.exit_codes import ExitCode
from seedrl.service.generate import reference_exit_codes


def _rows():
    return {
        cells[0]: cells
        for line in reference_exit_codes.page().splitlines()
        if line.startswith("| `")
        for cells in [[c.strip() for c in line.strip("|").split(" | ")]]
    }


def test_every_code_has_a_row_with_its_name_reason_meaning_and_restart():
    rows = _rows()
    for code in ExitCode:
        row = rows[f"`{int(code)}`"]
        assert row[1:3] == [f"`{code.name}`", f"`{code.reason}`"]
        assert len(row[3]) > 20  # the member's own documentation, not a placeholder
    assert rows["`2`"][4] == "Not restarted (`PERMANENT`)."
    assert rows["`75`"][4] == "Restarted, not counted (`RETRY_FREELY`)."
    assert rows["`1`"][4] == "Restarted, counted against `spec.backoffLimit`."
    assert f"`{exit_codes.SIGKILLED}`" in rows


def test_the_meaning_is_the_members_comment():
    rows = _rows()
    assert rows["`4`"][3] == (
        "The learner cannot use its checkpoint location: nothing there loads, or another learner "
        "publishes there."
    )
