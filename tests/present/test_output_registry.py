"""Output files are registered once (present/outputs/emit.py:OUTPUT_FILES): the registration makes
the command line's flag and the write, so an output is its module plus one entry."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from orchestrator.cli.main import build_parser
from orchestrator.present.outputs import emit
from orchestrator.verdict.result import FleetResult
from tests.support.judged import judged
from tests.verdict.test_diff import finding, fleet, host


def demo_fleet() -> FleetResult:
    return judged(fleet("20261201T000000Z-abc123", [host("gpu01"), host("gpu02", cls="B")],
                 [finding("gpu.count.mismatch", "gpu01", "host")]))


def _parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


@pytest.mark.parametrize("out", emit.OUTPUT_FILES, ids=[o.name for o in emit.OUTPUT_FILES])
def test_every_registered_output_is_a_run_flag_and_is_written(out: emit.OutputFile, tmp_path: Path) -> None:
    target = tmp_path / f"{out.name}.out"
    args = _parse("run", out.flag, str(target))
    assert emit.requested(args) == {out.name: str(target)}
    written = emit.write_outputs(demo_fleet(), check_ids=["gpu.count.mismatch"], **emit.requested(args))
    assert written == [target] and target.stat().st_size > 0


def test_import_commands_take_only_the_drain_file() -> None:
    args = _parse("import", "--slurm-drain", "d.txt", "x.json")
    assert emit.requested(args) == {"slurm_drain": "d.txt"}
    with pytest.raises(SystemExit):
        _parse("import", "--prometheus", "p.prom", "x.json")


def test_an_unknown_output_name_is_refused() -> None:
    with pytest.raises(TypeError, match="no output named html_report"):
        emit.write_outputs(judged({}), html_report="x.html")


def test_a_new_registration_is_a_flag_and_a_write(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def write(fleet: FleetResult, path: Path, ctx: emit.WriteContext) -> Path:
        path.write_text(f"{len(fleet.hosts)} hosts\n")
        return path

    monkeypatch.setattr(emit, "OUTPUT_FILES", (*emit.OUTPUT_FILES, emit.OutputFile("host_count", "hosts", write)))
    target = tmp_path / "n.txt"
    args = _parse("run", "--host-count", str(target))
    emit.write_outputs(demo_fleet(), **emit.requested(args))
    assert target.read_text() == f"{len(demo_fleet().hosts)} hosts\n"
