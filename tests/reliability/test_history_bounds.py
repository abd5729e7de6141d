"""History read in bounded time and memory (issue 45, item 6).

`probe run` reads the previous run of the same inventory for drift and the runs before it for
repeat offenders.  A huge or hostile past run (600,000 findings, 117 MiB: on ec1b3e5 the next
3-host run took 22.7 s and 962 MiB, here 11 minutes and 939 MiB on a busy machine) costs only its
own reading, bounded: the first store/history.py:HISTORY_FINDINGS findings are read, the rest of
its file is not, and the run says so.  Memory is what the test bounds (never wall time).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.files import jsonstream
from orchestrator.files.jsonstream import JsonStream
from orchestrator.store import fleet_file
from orchestrator.store.fleet_file import read_fleet, read_fleet_bounded
from orchestrator.store.history import HISTORY_FINDINGS
from tests.support.history import swell_findings
from tests.support.hostile import cli_env, run_cli

THREE = ["dgx-h100-01", "dgx-h100-02", "dgx-h100-03"]
# The controller of a 3-host demo run with a sane history peaks near 45 MiB; with the previous run
# of 600,000 findings it peaked at 939 MiB before the bound.  Reading its first HISTORY_FINDINGS
# findings (about 3 KB each, parsed) stays well under this.
RSS_BOUND_KIB = 200 * 1024


def _run(tmp_path: Path, results: Path, rss: Path | None = None) -> tuple[int, str, str, int | None]:
    run = run_cli(["run", "-l", ",".join(THREE), "--results", str(results)], timeout=300,
                  env=cli_env(XDG_STATE_HOME=str(tmp_path / "state")), measure_rss=rss)
    return run.code, run.stdout, run.stderr, run.rss_kib


def test_a_previous_run_of_600000_findings_costs_the_next_run_bounded_memory(tmp_path: Path) -> None:
    results = tmp_path / "runs"
    code, _out, err, _rss = _run(tmp_path, results)
    assert code == 0, err[-2000:]
    (previous,) = [p for p in results.iterdir() if p.is_dir()]
    size = swell_findings(previous, 600_000, THREE)
    assert size > 110 << 20  # the 117 MiB
    code, out, err, rss = _run(tmp_path, results, tmp_path / "rss")
    assert code == 0, err[-2000:]
    assert rss is not None and rss < RSS_BOUND_KIB, f"controller peak RSS {rss} KiB with a huge previous run"
    assert f"its findings were more than {HISTORY_FINDINGS:,}: drift and repeat offenders are judged on the " \
           f"first {HISTORY_FINDINGS:,}" in err, err[-2000:]
    assert err.count("its findings were more than") == 1, err  # read once, said once
    assert f"drift {previous.name} ->" in out  # drift is still shown, on what was read


@pytest.mark.parametrize("count,more", [(0, False), (7, False), (8, True), (50, True)])
def test_a_past_runs_findings_are_read_up_to_the_bound_and_the_rest_is_not(tmp_path: Path, count: int,
                                                                           more: bool) -> None:
    results = tmp_path / "runs"
    code, _out, err, _rss = _run(tmp_path, results)
    assert code == 0, err[-2000:]
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    if count:
        swell_findings(run, count, THREE)
    whole = read_fleet(run / "fleet.json")
    read = read_fleet_bounded(run / "fleet.json", 7)
    assert read.more is more and read.kept == min(count, 7)
    assert read.doc["findings"] == whole["findings"][:7]
    assert [h["name"] for h in read.doc["hosts"]] == THREE  # the hosts are read on demand, as ever
    if not more:  # what follows the findings is read where all of them were
        assert read.doc["not_judged"] == whole["not_judged"] and read.doc["silenced"] == whole["silenced"]


def test_a_past_run_without_its_index_is_read_whole_only_up_to_its_bound(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    results = tmp_path / "runs"
    code, _out, err, _rss = _run(tmp_path, results)
    assert code == 0, err[-2000:]
    (run,) = [p for p in results.iterdir() if p.is_dir()]
    (run / fleet_file.INDEX_NAME).unlink()
    assert read_fleet_bounded(run / "fleet.json", 7).doc["hosts"]
    monkeypatch.setattr(fleet_file, "WHOLE_LIMIT", 1000)
    with pytest.raises(ValueError, match="without a valid index"):
        read_fleet_bounded(run / "fleet.json", 7)


# JSON texts whose values cross chunk boundaries anywhere: numbers (a cut "12" is not 12),
# multi-byte characters, escaped quotes, nesting.
STREAMED = ['[12345, 6.02e23, -0.5, true, null, "a\\"b", {"k": [1, {"x": "é€😀"}]}, 1]',
            "[]", "[ 7 ]", '[{"id": "pcie.link.downgraded", "n": 123456789012}, "' + "z" * 300 + '"]']


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64])
@pytest.mark.parametrize("text", STREAMED)
def test_a_json_stream_gives_the_values_json_would(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int,
                                                   text: str) -> None:
    monkeypatch.setattr(jsonstream, "CHUNK", chunk)
    path = tmp_path / "t.json"
    path.write_text(text, encoding="utf-8")
    with open(path, "rb") as f:
        assert list(JsonStream(f, path.stat().st_size, 1000).elements()) == json.loads(text)


@pytest.mark.parametrize("text", ['["' + "x" * 5000 + '"]', "[" + "1" * 5000 + "]", '[{"a": "' + "y" * 3000 + '"}]',
                                  "[1, 2", '["open', "[1 2]", "{}"])
def test_a_json_stream_refuses_a_value_over_its_bound_or_cut_text(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  text: str) -> None:
    monkeypatch.setattr(jsonstream, "CHUNK", 64)
    path = tmp_path / "t.json"
    path.write_text(text)
    with open(path, "rb") as f, pytest.raises(ValueError):
        list(JsonStream(f, path.stat().st_size, 1000).elements())
