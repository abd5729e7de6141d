"""An output asked for that cannot be written fails the command (issue 28, item 5): one line naming
the file and why, every other output still written, exit 73 (a cron job must not read success).
`probe import TEXT --slurm-drain FILE` writes the drain file as `probe run` does."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli.exitcodes import ExitStatus
from orchestrator.present.outputs.emit import OUTPUT_FILES
from tests.support.evidence import EVIDENCE
from tests.support.hostile import run_cli

FLAGS = [o.flag for o in OUTPUT_FILES] + ["--html"]
DIR_FLAGS = {o.flag for o in OUTPUT_FILES if o.metavar == "DIR"}  # --node-verdicts: a directory of files


def _written(path: Path, flag: str) -> bool:
    return any(path.glob("*.json")) if flag in DIR_FLAGS else path.is_file()


def _unwritable(tmp_path: Path) -> Path:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where a directory should be")
    return blocker / "out"


@pytest.mark.parametrize("flag", FLAGS)
def test_an_unwritable_output_exits_73_and_the_others_are_written(tmp_path: Path, flag: str) -> None:
    bad = _unwritable(tmp_path)
    others = [f for f in FLAGS if f != flag]
    args = ["run", "-l", "dgx-h100-05,dgx-h100-01", "--results", str(tmp_path / "runs"), flag, str(bad)]
    for f in others:
        args += [f, str(tmp_path / f.strip("-"))]
    r = run_cli(args, timeout=120)
    assert r.code == ExitStatus.RESULTS_UNWRITABLE, (r.code, r.stderr)
    line = r.one_line_error()
    assert flag in line and str(bad) in line and "not-a-dir is not a directory" in line, r.stderr
    assert [f for f in others if not _written(tmp_path / f.strip("-"), f)] == []
    assert "RECAP" in r.stdout  # the run itself was shown and stored
    assert list((tmp_path / "runs").glob("*/fleet.json"))


def test_probe_report_to_an_unwritable_path_exits_73(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    assert run_cli(["run", "-l", "dgx-h100-01", "--results", str(runs), "-q"], timeout=120).code == 0
    bad = _unwritable(tmp_path)
    r = run_cli(["report", "--results", str(runs), "-o", str(bad)])
    assert r.code == ExitStatus.RESULTS_UNWRITABLE, r.stderr
    assert str(bad) in r.one_line_error()


def test_import_writes_the_slurm_drain_file(tmp_path: Path) -> None:
    """A topo -m of 6 GPUs where 8 were bought: a fail finding, so a drain line."""
    drain = tmp_path / "drain.sh"
    topo = EVIDENCE / "topo_h100_6gpu_visible_2nic_01.txt"
    r = run_cli(["import", str(topo), "--host", "node07", "--expect", "gpu_count=8", "--results",
                 str(tmp_path / "runs"), "--slurm-drain", str(drain), "-q"])
    assert r.code == ExitStatus.FINDINGS_FAIL, r.stdout + r.stderr
    lines = drain.read_text().splitlines()
    assert lines[0].startswith("# fleetprobe run ") and "1 node(s) with fail findings" in lines[0]
    [line] = [ln for ln in lines if ln.startswith("unless_foreign_reason ")]  # issue 47: through the guard
    assert line.startswith('unless_foreign_reason scontrol update NodeName=node07 State=DRAIN Reason="fleetprobe ')
    assert "gpu.count.mismatch" in line
