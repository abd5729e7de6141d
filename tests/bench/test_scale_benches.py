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


@pytest.mark.parametrize("changed", [False, True])
def test_step_ab_times_two_codes_only_where_they_answer_alike(tmp_path: Path, changed: bool) -> None:
    """bench/step_ab.py (judging's CPU, round 3) runs another checkout's file of a module beside
    this one's: a base that answers otherwise is refused, not timed."""
    import subprocess

    repo = BENCH.parent
    rel = Path("orchestrator/facts/read.py")
    text = (repo / rel).read_text()
    if changed:  # every level a host's matrix holds read one row off
        text = text.replace("a = labels[i]", "a = labels[i - 1]")
        assert "labels[i - 1]" in text
    (tmp_path / rel).parent.mkdir(parents=True)
    (tmp_path / rel).write_text(text)
    run = subprocess.run([sys.executable, str(BENCH / "step_ab.py"), str(tmp_path), "orchestrator.facts.read",
                          "level_matrix"], capture_output=True, text=True, cwd=repo, timeout=600)
    if changed:
        assert run.returncode != 0 and "answer differently" in run.stderr, run.stderr
    else:
        assert run.returncode == 0, run.stderr
        assert "level_matrix: base " in run.stdout and "us CPU a host" in run.stdout
