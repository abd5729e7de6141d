"""The security floor: NVIDIA's bulletins as a shipped data file, each driver of a fixture list judged
against it, the generator reading real bulletin excerpts, and `--security-floor FILE` through the
real CLI with its date in the report."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from orchestrator.facts import security
from orchestrator.verdict.checks.base import HostView
from orchestrator.verdict.checks.software import (
    SECURITY_BRANCH,
    SECURITY_DRIVER,
    security_driver,
    security_firmware,
)
from orchestrator.verdict.coverage import not_judged
from orchestrator.verdict.expectations import Expectations
from tests.verdict.test_verdict_demo import run_cli

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "security"
ON = Expectations(security_floor=True)


def _tool() -> ModuleType:
    spec = importlib.util.spec_from_file_location("security_floor_tool", ROOT / "tools" / "security_floor.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _host(version: str) -> dict[str, Any]:
    return {"host": {"driver": {"loaded": True, "version": version}}}


def _drivers() -> list[tuple[str, str, str]]:
    rows = []
    for line in (FIXTURES / "drivers.tsv").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            version, verdict, bulletin = line.split("\t")
            rows.append((version, verdict, bulletin))
    return rows


def test_the_shipped_floor_names_its_sources_and_its_date() -> None:
    floor = security.load()
    assert floor.file == "shipped" and re.fullmatch(r"\d{4}-\d{2}-\d{2}", floor.date)
    assert floor.date == max(b.date for b in (*floor.driver, *floor.firmware))
    doc = json.loads(security.SHIPPED.read_text())
    assert "https://github.com/NVIDIA/product-security" in doc["sources"]
    for b in (*floor.driver, *floor.firmware):
        assert b.source.startswith("https://github.com/NVIDIA/product-security/blob/main/"), b.id
        assert b.url == f"https://nvidia.custhelp.com/app/answers/detail/a_id/{b.id}"
        assert b.cves and all(c.startswith("CVE-") for c in b.cves), b.id
    # the May 2026 GPU Display Driver bulletin, as NVIDIA published it
    may = next(b for b in floor.driver if b.id == "5821")
    assert dict(may.fixed) == {"R595": "595.71.05", "R580": "580.159.03", "R535": "535.309.01"}


@pytest.mark.parametrize(("version", "verdict", "bulletin"), _drivers(), ids=lambda v: str(v))
def test_each_driver_of_the_fixture_list_against_the_shipped_floor(version: str, verdict: str, bulletin: str) -> None:
    found = list(security_driver(HostView("h", _host(version), expect=ON)))  # type: ignore[arg-type]
    if verdict == "pass":
        assert found == []
        return
    assert len(found) == 1, found
    f = found[0]
    if verdict == "below":
        assert (f.id, f.severity.value, f.kind.value) == (SECURITY_DRIVER, "fail", "fault")
        assert f"bulletin {bulletin} (" in f.message  # names the newest bulletin whose fix it lacks
        assert f.expected.startswith(">= ") and "CVE-" in " ".join(f.evidence)
    elif verdict == "branch":
        assert (f.id, f.severity.value) == (SECURITY_BRANCH, "warn")
        assert (f"bulletin {bulletin} (" in f.message) if bulletin != "-" else "in none of the floor's bulletins" in f.message
    else:  # a branch newer than the file: not judged, said so, never a pass
        assert (f.id, f.kind.value) == (SECURITY_DRIVER, "unknown")
    assert any(e.startswith("shipped security floor of ") for e in f.evidence)


def test_adapter_firmware_against_its_train() -> None:
    floor = security.load()
    v = floor.judge_firmware("28.39.1002")  # ConnectX-7 on the LTS23 train, before its fix
    assert v is not None and v.family == "ConnectX-7"
    assert next((b.id, need) for b, need in v.missing) == ("5699", "28.39.8002 or newer")
    assert not floor.judge_firmware("28.39.8002").missing  # type: ignore[union-attr]
    assert not floor.judge_firmware("28.46.3008").missing  # type: ignore[union-attr]
    assert not floor.judge_firmware("28.48.1000").missing  # type: ignore[union-attr]  # newer than any bulletin
    old_train = floor.judge_firmware("28.37.1014")  # a GA train that got no fix: move to one that did
    assert old_train is not None and "a fixed train" in old_train.missing[0][1]
    assert floor.judge_firmware("2.42.5000") is None  # ConnectX-3: no bulletin covers it
    nic = {"nic": {"devices": [{"name": f"mlx5_{i}", "bus_id": f"0000:{i:02x}:00.0", "fw_ver": "28.39.1002"}
                               for i in range(3)]}}
    found = list(security_firmware(HostView("h", nic, expect=ON)))  # type: ignore[arg-type]
    assert len(found) == 1 and "on 3 adapter(s)" in found[0].message  # one finding per version


def test_a_floor_nobody_asked_for_is_not_judged_never_passed() -> None:
    facts: Any = _host("535.104.05")
    assert list(security_driver(HostView("h", facts))) == []
    why = not_judged(facts, {"host": "ok"}, {"host": {"outcome": "ok"}}, Expectations())
    assert why[SECURITY_DRIVER] == "no expectation security_floor set"
    assert SECURITY_DRIVER not in not_judged(facts, {"host": "ok"}, {"host": {"outcome": "ok"}}, ON)


def test_the_generator_reads_nvidia_bulletins() -> None:
    doc = _tool().build(FIXTURES / "product-security")
    floor = security.parse(doc, "fixture")
    (drv,) = floor.driver
    assert (drv.id, drv.date) == ("5821", "2026-05-21")
    # Linux rows of the data-center and GeForce products; vGPU guest rows and Windows rows left out
    assert dict(drv.fixed) == {"R595": "595.71.05", "R580": "580.159.03", "R535": "535.309.01"}
    assert drv.cves == ("CVE-2026-24187", "CVE-2026-24190")
    (nic,) = floor.firmware
    trains: dict[tuple[int, int], set[str]] = {}
    for f in nic.fixed:  # BlueField and ConnectX rows of one train are rows of their own
        trains.setdefault((f.train, f.build), set()).update(f.families)
    assert trains[(46, 1006)] >= {"BlueField-2", "BlueField-3", "ConnectX-7", "ConnectX-6 Dx"}  # "BludField-3"
    assert trains[(39, 5050)] >= {"ConnectX-6", "ConnectX-7"}
    assert trains[(32, 1908)] == {"ConnectX-4 Lx"}
    assert floor.date == "2026-05-21"


def test_a_broken_floor_file_is_refused_with_what_is_wrong(tmp_path: Path) -> None:
    bad = tmp_path / "floor.json"
    bad.write_text(json.dumps({"format": security.FORMAT, "date": "2026-01-01", "driver": [
        {"id": "1", "title": "t", "date": "2026-01-01", "url": "u", "source": "s", "cves": ["CVE-1"],
         "fixed": {"R535": "550.1"}}], "nic_firmware": []}))
    with pytest.raises(security.FloorError, match="versions of that branch"):
        security.load(str(bad))


def test_an_older_floor_file_through_the_cli_shows_its_date_in_the_report(tmp_path: Path) -> None:
    html = tmp_path / "report.html"
    floor = FIXTURES / "floor-2024.json"
    _rc, fleet, err = run_cli(["-l", "rent-h100-01:rent-h100-03", "--security-floor", str(floor), "--html", str(html)],
                             tmp_path / "run")
    assert fleet is not None, err
    by = {(f["host"], f["id"]): f for f in fleet["findings"]}
    old = by[("rent-h100-01", SECURITY_DRIVER)]  # 550.54.15: below R550's fix of bulletin 5586
    assert "bulletin 5586 (2024-12-05)" in old["message"]
    assert f"security floor {floor} of 2024-12-05" in old["evidence"]
    # R580 is newer than every branch a 2024 file knows: an unknown finding, not a pass
    assert by[("rent-h100-03", SECURITY_DRIVER)]["kind"] == "unknown"
    page = html.read_text()
    assert re.search(r'id="security-floor">security floor [^<]*floor-2024\.json of 2024-12-05 \(\d+ days before this run\)',
                     page), page[:2000]
