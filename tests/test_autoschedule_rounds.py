"""The finish shared by the CPU auto-scheduler's and the attention kernel's sessions:
which records are finalists, what the winner's confirm record holds, and how `finish`
falls back when the winner does not build. The full path (real builds, the isolated
runner, the records database) runs in test_autoschedule.py and test_cpu_attention.py."""

import pytest

from tensortune.autoschedule.rounds import TunerRounds, confirmed_winner, pick_finalists
from tensortune.db import Record, Target, Workload
from tensortune.measure import MeasureResult
from tensortune.space import Config
from tensortune.tuner import TuningFailed

W = Workload.make("rounds-test", "src")
T = Target.make("cpu", "test-cpu")


def _record(name: str, *times: float, **extra) -> Record:
    return Record(W, T, Config({"name": name}), tuple(times), extra=dict(extra))


STEADY = _record("steady", 1.0, 1.0, 0.95)  # median 1.0, fastest 0.95
NOISY = _record("noisy", 1.1, 0.5, 1.6)  # median 1.1, fastest 0.5: fast, measured on a busy machine
SLOW = _record("slow", 2.0, 1.9, 2.1)


def test_finalists_are_near_the_best_by_each_rank_each_once():
    records = [SLOW, NOISY, STEADY]
    assert pick_finalists(records, 4, ("median", "fastest")) == [STEADY, NOISY]
    assert pick_finalists(records, 4, ("fastest",)) == [NOISY]
    assert pick_finalists(records, 1, ("median", "fastest")) == [STEADY, NOISY]
    assert pick_finalists(records, 4, ("median",), within=0.05) == [STEADY]
    assert pick_finalists(records, 4, ("median",), within=1.5) == [STEADY, NOISY, SLOW]


def test_the_winner_has_the_lowest_median_of_its_fastest_run_per_round():
    records = [_record("a", 1.0, sketch="x"), _record("b", 1.0, sketch="y")]
    per_round = [[(3.0, 2.0), (2.0, 4.0), (2.0, 2.5)],  # fastest per round 2, 2, 2
                 [(1.0, 9.0), (5.0, 1.5), (9.0, 1.2)]]  # 1, 1.5, 1.2: median 1.2 despite slow runs
    won = confirmed_winner(records, per_round, 3, margin=True)
    assert won.config == records[1].config
    assert won.times == (1.0, 9.0, 5.0, 1.5, 9.0, 1.2)
    assert won.extra == {"sketch": "y", "confirmed": True, "finalists": 2, "rounds": 3, "best_run_median": 1.2,
                         "margin": round(2.0 / 1.2 - 1, 4)}
    assert list(won.extra) == ["sketch", "confirmed", "finalists", "rounds", "best_run_median", "margin"]
    plain = confirmed_winner(records, per_round, 3, margin=False)
    assert "margin" not in plain.extra and plain.config == won.config
    alone = confirmed_winner(records[:1], per_round[:1], 3, margin=True)
    assert alone.extra["margin"] == 0.0 and alone.extra["finalists"] == 1


class _Runner:
    closed = False

    def close(self) -> None:
        self.closed = True


class _Session(TunerRounds[str]):
    """A session whose winner and records are given: `finish`'s fallbacks in isolation."""

    winner_fallback = "; next"

    def __init__(self, winner: MeasureResult | None, builds: bool, recorded: str | None) -> None:
        self.problem = type("P", (), {"name": "p", "workload": W})()
        self.runner = _Runner()  # type: ignore[assignment]
        self.results, self.seconds = [MeasureResult(Config({"name": "a"}), (1.0,))], 0.0
        self.winner, self.builds, self.recorded = winner, builds, recorded
        self.asked: list[tuple[int, int]] = []

    def confirm(self, k: int, rounds: int, within: float = 0.15) -> MeasureResult | None:
        self.asked.append((k, rounds))
        return self.winner

    def build_kernel(self, config: Config, best_time: float, trials: int, seconds: float) -> str:
        if not self.builds:
            raise RuntimeError("does not compile")
        return f"built {config['name']} {best_time} {trials}"

    def rebuild_kernel(self, trials: int, seconds: float) -> str | None:
        return self.recorded

    def failure_message(self) -> str:
        return f"nothing works after {len(self.results)} trials"


WINNER = MeasureResult(Config({"name": "w"}), (0.5, 0.25, 0.5))


def test_finish_builds_the_confirmed_winner_and_closes_the_runner():
    s = _Session(WINNER, builds=True, recorded="recorded")
    assert s.finish(3, 2) == "built w 0.5 1"
    assert s.asked == [(3, 2)] and s.runner.closed and s.seconds > 0


def test_finish_without_confirming_rebuilds_the_best_record():
    s = _Session(WINNER, builds=True, recorded="recorded")
    assert s.finish(1, 2) == "recorded"
    assert s.asked == [] and s.runner.closed


def test_a_winner_that_does_not_build_is_said_and_the_records_are_tried():
    s = _Session(WINNER, builds=False, recorded="recorded")
    with pytest.warns(UserWarning, match=r"^p: the confirmed winner could not be rebuilt \(does not compile\); next$"):
        assert s.finish(4, 5) == "recorded"


def test_no_record_that_builds_is_the_sessions_failure():
    s = _Session(None, builds=True, recorded=None)
    with pytest.raises(TuningFailed, match="nothing works after 1 trials"):
        s.finish(4, 5)
    assert s.runner.closed
