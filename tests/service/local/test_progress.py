"""The progress line shows budget fraction, rate, episodes, return and elapsed time."""

import io

from seedrl.common.config import BudgetConfig
from seedrl.common.learner_status import LearnerStatus
from seedrl.service.local.progress import Progress


def snapshot(**fields) -> LearnerStatus:
    return LearnerStatus(state="running", **fields)


def test_line_shows_the_figures_of_a_status_snapshot():
    p = Progress("exp", BudgetConfig(max_env_steps=1000), out=io.StringIO())
    p.line(snapshot(env_steps=0, elapsed=0.0))
    line = p.line(
        snapshot(
            env_steps=500, elapsed=2.0, episodes=12, mean_return=31.25, return_window=12, actors=2
        )
    )
    assert "[##########..........]  50%" in line
    assert "500/1,000 steps" in line and "250 steps/s" in line
    assert "12 episodes" in line and "return(12) 31.2" in line and "0:00:02" in line


def test_no_bar_without_a_limit_and_dash_before_the_first_episode():
    p = Progress("exp", BudgetConfig(max_env_steps=0), out=io.StringIO())
    line = p.line(snapshot(env_steps=10, elapsed=1.0))
    assert "[" not in line and "return(0) -" in line


def test_time_budget_drives_the_bar_when_it_is_further_along():
    p = Progress("exp", BudgetConfig(max_env_steps=1000, max_seconds=10), out=io.StringIO())
    assert p.fraction(snapshot(env_steps=100, elapsed=5.0)) == 0.5


def test_not_a_terminal_prints_whole_lines():
    out = io.StringIO()
    p = Progress("exp", BudgetConfig(), out=out, every_s=0)
    p.update(snapshot(env_steps=1, elapsed=1.0))
    p.close()
    assert out.getvalue().count("\n") == 1 and "\r" not in out.getvalue()


def test_evaluation_return_is_shown_when_the_agent_has_evaluation_actors():
    line = Progress("x", BudgetConfig(), out=io.StringIO()).line(
        snapshot(
            env_steps=10,
            episodes=2,
            mean_return=12.0,
            return_window=2,
            eval_mean_return=480.5,
            elapsed=3,
        )
    )
    assert "return(2) 12.0 | eval 480.5" in line
