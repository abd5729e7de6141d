"""The scale benchmarks of issue 51 measure the code as it is: bench/worker_phases.py times the
steps a judging worker takes today (it broke silently when the stored form changed), and
bench/stream_bench.py's merge reuses the first parts of a larger set only where they hold the same
hosts, written by the same code."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH.parent))

from bench import stream_bench, worker_phases  # noqa: E402


def test_worker_phases_times_every_step_of_todays_worker() -> None:
    spent = worker_phases.phases(worker_phases.WARM + 4)
    assert list(spent) == list(worker_phases.STEPS)
    assert all(s > 0 for s in spent.values()), spent


def _made(work: Path, name: str, shards: int) -> Path:
    d = work / name
    d.mkdir()
    (d / "done").write_text("")
    for k in range(1, shards + 1):
        (d / f"s{k}").mkdir()
    return d


def test_merge_parts_are_the_first_of_a_larger_set_of_the_same_maker(tmp_path: Path) -> None:
    big = _made(tmp_path, "parts-100x1000-own-by-abc", 100)
    _made(tmp_path, "parts-100x1000-own", 100)
    got = stream_bench.make_parts(tmp_path, 50, 1000, False, ("abc", tmp_path))
    assert got == [str(big / f"s{k}") for k in range(1, 51)]


def test_merge_parts_are_not_taken_from_another_maker_another_size_or_an_unfinished_set(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    others = [_made(tmp_path, "parts-100x500-own-by-abc", 100),  # other hosts in each part
              _made(tmp_path, "parts-100x1000-own-by-xyz", 100),  # other code wrote them
              _made(tmp_path, "parts-20x1000-own-by-abc", 20)]  # too few
    (tmp_path / "parts-200x1000-own-by-abc").mkdir()  # no `done`: being made, or broken off
    made: list[int] = []

    def make_documents(_work: Path, n: int) -> Path:
        made.append(n)
        raise SystemExit("the parts would be made anew")

    monkeypatch.setattr(stream_bench, "make_documents", make_documents)
    with pytest.raises(SystemExit):
        stream_bench.make_parts(tmp_path, 50, 1000, False, ("abc", tmp_path))
    assert made == [50_000]
    for d in others:  # left as they were
        assert (d / "done").is_file() and (d / "s1").is_dir()
