"""Reference files are untrusted input like every other (issue 45, item 5).

A baseline file (`--baseline-file`) and a security floor (`--security-floor`) decide what is
"normal" for every host of a run.  Each is read through the bounded regular-file reader (a FIFO,
a device, a directory or a file over its limit is refused at once, never waited on or read whole),
as strict JSON, and every field it is judged by is checked: finite, in range, real dates, driver
versions of their branch.  What is wrong costs the run one message naming the file and the field,
exit 2 (a usage error: nothing was run), never 70 and never a finding blamed on every host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api.plan import PlanInputs, ReferenceFileError, load_references
from orchestrator.facts import security
from orchestrator.verdict import baseline
from tests.support.hostile import cli_env, run_cli
from tests.support.sshd import ROOT_DIR

# Numbers no reference figure may be, as JSON text: NaN and the infinities (Python's json reads
# them), a float past 1.8e308, integers of 4,000 and 5,000 digits (the second past what Python
# converts at all), a negative, and values of other types.
BAD_FIGURES = ["NaN", "Infinity", "-Infinity", "1e400", "-1", "-0.5", "9" * 4000, "9" * 5000, '"12"', "true",
               "null", "[]", "{}"]
BAD_COUNTS = [*BAD_FIGURES, "0", "1.5", "3e7"]
BAD_DATES = ["9999-99-99", "2024-02-30", "2023-13-01", "0000-00-00", "1899-12-31", "2200-01-01", "2024-1-1",
             "yesterday", ""]
# {b}: the digits of the branch the version is listed under (R535: 535)
BAD_DRIVER_VERSIONS = ["999999999999.1", "{b}.1.2.3.4.5.6.7", "abc", "{b}.", "{b}.abc", "{b}.99999.01",
                       "{b}.183.01\n", "{b}.183.01 ; rm -rf /", "{b}.183.01.", "{b}.-1", "{b}.1e9", "{b}.٣٤.01",
                       "{b}." + "9" * 5000]
BAD_FW_NUMBERS = ["-1", "100000", "9" * 4000, "1.5", '"39"', "true", "NaN", "Infinity"]


def _baseline_text(field: str, value: str) -> str:
    figure = {"median": "52.1", "mad": "0.4", "n": "12"}
    figure[field] = value
    stats = "{" + ", ".join(f'"{k}": {v}' for k, v in figure.items()) + "}"
    return ('{"format": "fleetprobe-baseline/1", "made_from": "t", "classes": {"fp1": {"name": "8xH100", '
            f'"hosts": 12, "host": {{"h2d_gbps": {stats}}}, "gpu": {{}}}}}}}}')


def _refused(inputs: PlanInputs, option: str, *named: str) -> str:
    with pytest.raises(ReferenceFileError) as raised:
        load_references(inputs)
    message = str(raised.value)
    assert message.startswith(f"{option}: ") and "None" not in message, message
    for part in named:
        assert part in message, message
    return message


@pytest.mark.parametrize("field", ["median", "mad"])
@pytest.mark.parametrize("value", BAD_FIGURES)
def test_a_baseline_figure_that_is_not_a_finite_non_negative_number_is_refused_naming_it(
        tmp_path: Path, field: str, value: str) -> None:
    """NaN passed every comparison, a negative median degraded healthy hosts, Infinity ended the
    run with exit 70: now each names the file and the field."""
    base = tmp_path / "base.json"
    base.write_text(_baseline_text(field, value))
    _refused(PlanInputs(baseline_file=str(base)), "--baseline-file", str(base), "h2d_gbps", field)


@pytest.mark.parametrize("value", BAD_COUNTS)
def test_a_baseline_count_that_is_not_a_whole_number_of_peers_is_refused_naming_it(tmp_path: Path, value: str) -> None:
    base = tmp_path / "base.json"
    base.write_text(_baseline_text("n", value))
    _refused(PlanInputs(baseline_file=str(base)), "--baseline-file", str(base), "h2d_gbps", "n")


def test_a_sane_baseline_file_is_still_read(tmp_path: Path) -> None:
    base = tmp_path / "base.json"
    base.write_text(_baseline_text("median", "0"))  # zero is a figure (an idle counter), not a refusal
    refs = load_references(PlanInputs(baseline_file=str(base)))
    assert refs.baseline is not None
    assert refs.baseline.classes["fp1"].host[("h2d_gbps", "")] == baseline.Stats(0.0, 0.4, 12)


def _floor(**change: Any) -> dict[str, Any]:
    doc = json.loads(security.SHIPPED.read_text())
    doc.update(change)
    return doc


def _floor_text(doc: dict[str, Any], at: str, value: str) -> str:
    """The floor document as JSON text with the string `at` replaced by raw JSON `value`."""
    text = json.dumps(doc)
    assert text.count(json.dumps(at)) >= 1
    return text.replace(json.dumps(at), value, 1)


@pytest.mark.parametrize("date", BAD_DATES)
@pytest.mark.parametrize("where", ["file", "bulletin"])
def test_a_floor_date_that_is_not_a_real_date_in_range_is_refused(tmp_path: Path, date: str, where: str) -> None:
    """9999-99-99 was printed in every finding; 2024-02-30 is no day."""
    doc = _floor()
    if where == "file":
        doc["date"] = date
    else:
        doc["driver"][0]["date"] = date
    floor = tmp_path / "floor.json"
    floor.write_text(json.dumps(doc))
    _refused(PlanInputs(security_floor=str(floor)), "--security-floor", str(floor), "date")


@pytest.mark.parametrize("version", BAD_DRIVER_VERSIONS)
def test_a_floor_driver_version_that_is_not_one_of_its_branch_is_refused(tmp_path: Path, version: str) -> None:
    """An absurd version was blamed on every host as probe.data.malformed."""
    doc = _floor()
    branch = next(iter(doc["driver"][0]["fixed"]))
    doc["driver"][0]["fixed"][branch] = version.replace("{b}", branch[1:])
    floor = tmp_path / "floor.json"
    floor.write_text(json.dumps(doc))
    _refused(PlanInputs(security_floor=str(floor)), "--security-floor", str(floor), "fixed", "versions of that branch")


@pytest.mark.parametrize("field", ["train", "build"])
@pytest.mark.parametrize("value", BAD_FW_NUMBERS)
def test_a_floor_firmware_number_out_of_range_is_refused_naming_it(tmp_path: Path, field: str, value: str) -> None:
    doc = _floor()
    doc["nic_firmware"][0]["fixed"][0][field] = "@@"
    floor = tmp_path / "floor.json"
    floor.write_text(_floor_text(doc, "@@", value))
    message = _refused(PlanInputs(security_floor=str(floor)), "--security-floor", str(floor))
    assert field in message or "not a finite number" in message or "JSON" in message, message


def test_the_shipped_floor_passes_its_own_checks() -> None:
    floor = security.load()
    assert floor.driver and floor.firmware and security.DATE_MIN.isoformat() <= floor.date


def _not_files(tmp_path: Path) -> dict[str, Path]:
    """Paths that are no reference file: a FIFO (nobody writes it: a read would wait for ever),
    a device that never ends, a directory, and a file of 100 MiB (sparse: no disk spent)."""
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    big = tmp_path / "big.json"
    with open(big, "wb") as f:
        f.truncate(100 << 20)
    (tmp_path / "dir.json").mkdir()
    return {"fifo": fifo, "device": Path("/dev/zero"), "directory": tmp_path / "dir.json", "big": big}


@pytest.mark.parametrize("option", ["--baseline-file", "--security-floor"])
def test_a_reference_path_that_is_no_file_is_refused_at_once_through_the_cli(tmp_path: Path, option: str) -> None:
    """A FIFO hung the run, /dev/zero grew to the memory kill: each is refused before anything runs."""
    for kind, path in _not_files(tmp_path).items():
        run = run_cli(["run", "-l", "dgx-h100-01", option, str(path), "--results", str(tmp_path / "runs")],
                      timeout=60, env=cli_env(XDG_STATE_HOME=str(tmp_path / "state")))
        assert run.code == 2, (kind, run.code, run.stderr[-2000:])
        line = run.one_line_error()
        assert line.startswith(f"probe: error: {option}: ") and str(path) in line, (kind, line)
        assert ("not a regular file" in line or "a directory" in line or "over the" in line), (kind, line)
        assert not (tmp_path / "runs").exists() or not list((tmp_path / "runs").iterdir()), kind


@pytest.mark.parametrize("text", ['{"format": "fleetprobe-baseline/1", "classes": {"x": {"name": "c", "host": '
                                  '{"h2d_gbps": {"median": 50, "mad": 1, "n": Infinity}}}}}',
                                  '{"format": "fleetprobe-baseline/1", "classes": {"x": {"name": "c", "host": '
                                  '{"h2d_gbps": {"median": -50, "mad": 1, "n": 4}}}}}',
                                  "[" * 100_000])
def test_a_bad_baseline_file_through_the_cli_is_exit_2_never_70(tmp_path: Path, text: str) -> None:
    base = tmp_path / "base.json"
    base.write_text(text)
    run = run_cli(["run", "-l", "dgx-h100-01", "--baseline-file", str(base), "--results", str(tmp_path / "runs")],
                  timeout=60, env=cli_env(XDG_STATE_HOME=str(tmp_path / "state")))
    assert run.code == 2, (run.code, run.stderr[-2000:])
    assert str(base) in run.one_line_error()


def _probe(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = cli_env(XDG_STATE_HOME=str(tmp_path / "state"))
    return subprocess.run([sys.executable, "-m", "orchestrator", *args], capture_output=True, text=True, env=env,
                          timeout=60, cwd=ROOT_DIR, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("kind", ["fifo", "device", "directory", "big"])
def test_rejudge_of_a_run_whose_plan_names_a_reference_that_became_no_file_is_refused(tmp_path: Path,
                                                                                      kind: str) -> None:
    """A stored run names its baseline file; that path is now a FIFO (or a device, a directory, a
    huge file): `probe rejudge` says so and what to do, it does not hang."""
    base = tmp_path / "base.json"
    base.write_text(_baseline_text("median", "52.1"))
    runs = tmp_path / "runs"
    made = _probe(tmp_path, "run", "-l", "dgx-h100-01", "--baseline-file", str(base), "--results", str(runs))
    assert made.returncode in (0, 1, 4, 5), made.stderr[-2000:]
    base.unlink()
    (tmp_path / "bad").mkdir()
    base.symlink_to(_not_files(tmp_path / "bad")[kind])
    again = _probe(tmp_path, "rejudge", "latest", "--results", str(runs))
    assert again.returncode == 2, (again.returncode, again.stderr[-2000:])
    line = [ln for ln in again.stderr.splitlines() if ln.strip()][-1]
    assert "Traceback" not in again.stderr and "--baseline-file" in line and str(base) in line, line
    assert "give --baseline-file FILE" in line, line


def test_merge_of_shards_whose_plan_names_a_baseline_file_that_became_a_fifo_warns_and_finishes(tmp_path: Path) -> None:
    """Each part's plan is rebuilt for its overrides: the FIFO its plan now names costs that part
    its playbook's silencing, with a warning naming the file; the merge is not left waiting."""
    base = tmp_path / "base.json"
    base.write_text('{"format": "fleetprobe-baseline/1", "made_from": "t", "classes": {}}')
    hosts = ",".join(f"dgx-h100-{i:02d}" for i in range(1, 9))
    parts = []
    for shard in ("1/2", "2/2"):
        results = tmp_path / f"part{shard[0]}"
        made = _probe(tmp_path, "run", "-l", hosts, "--shard", shard, "--baseline-file", str(base),
                      "--results", str(results))
        assert made.returncode in (0, 1, 4, 5), made.stderr[-2000:]
        parts += [str(p) for p in results.iterdir() if p.is_dir()]
    base.unlink()
    os.mkfifo(base)
    merged = _probe(tmp_path, "merge", *parts, "--results", str(tmp_path / "merged"))
    assert merged.returncode in (0, 1, 4, 5), (merged.returncode, merged.stderr[-2000:])
    assert "Traceback" not in merged.stderr
    warned = [ln for ln in merged.stderr.splitlines() if "--baseline-file" in ln]
    assert len(warned) == 2 and all(str(base) in ln and "not a regular file" in ln for ln in warned), merged.stderr
