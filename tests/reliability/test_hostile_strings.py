"""Host strings are made safe once at the boundary (lone surrogates replaced) and escaped again
for each output: terminal (controls, escapes, bidi), CSV (formulas, also after a line break, and
control characters), YAML, Prometheus, JUnit XML and HTML.  Each output is parsed back here."""

from __future__ import annotations

import copy
import csv
import io
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import yaml

from tests.support.hostile import (
    ESC,
    answer_file,
    bundle_printer,
    host_record,
    inventory,
    load_fleet,
    only_run_dir,
    recorded,
    run_cli,
)

# as a host would send them in JSON: escapes for a lone surrogate, NUL, OSC 52 (clipboard write),
# clear screen, a bidi override, C1 CSI, a CSV formula after a carriage return
NASTY_JSON = r'"\ud800x\u0000\u001b]52;c;aGk=\u0007\u001b[2J\u202eRTL\u009b31m\r=1+1\n@SUM(A1)"'
NASTY = json.loads(NASTY_JSON)
FORBIDDEN = [ESC, "\x00", "\u202e", "\x9b", "\x07", "\ud800"]


def _hostile_answers(bin_: Path) -> dict[str, Path]:
    host = copy.deepcopy(recorded("dgx-h100-01", "host"))
    host["data"].update(hostname="HOSTNAME", kernel="HOSTNAME")
    nvml = copy.deepcopy(recorded("dgx-h100-01", "nvml"))
    for g in nvml["data"]["gpus"]:
        g["name"] = "HOSTNAME"
        g["fabric"] = {"state": "HOSTNAME", "status": "HOSTNAME"}
    pcie = copy.deepcopy(recorded("dgx-h100-01", "pcie"))
    for d in pcie["data"]["devices"][:10]:
        d["driver"] = "HOSTNAME"
        d["netdevs"] = ["HOSTNAME"]
    out = {}
    for probe, env in (("host", host), ("nvml", nvml), ("pcie", pcie)):
        text = json.dumps(env).replace('"HOSTNAME"', NASTY_JSON)
        out[probe] = answer_file(bin_, f"{probe}.json", text.encode())
    return out


def _assert_clean(text: str, where: str) -> None:
    for ch in FORBIDDEN:
        assert ch not in text, (where, repr(ch))


def test_hostile_strings_are_escaped_in_every_output(tmp_path: Path) -> None:
    bin_ = tmp_path / "bin"
    hosts: dict[str, dict[str, Any]] = {
        "good01": {},
        "nasty01": {"ansible_python_interpreter": str(bundle_printer(bin_, "nasty", _hostile_answers(bin_)))},
    }
    inv = inventory(tmp_path / "inv.yml", hosts)
    results, out = tmp_path / "results", tmp_path / "out"
    outputs = ["--html", str(out / "r.html"), "--junit", str(out / "j.xml"), "--prometheus", str(out / "m.prom")]
    res = run_cli(["run", "-i", str(inv), "--probe", "host", "--probe", "nvml", "--probe", "pcie",
                   "--results", str(results), "--show", "pcie,gpus,topo", *outputs])
    assert res.code in (0, 1, 4, 5) and res.one_line_error() == "", res.stderr[-2000:]
    _assert_clean(res.stdout + res.stderr, "terminal")
    assert "nasty01" in res.stdout
    run_dir = only_run_dir(results)
    rec = host_record(load_fleet(run_dir), "nasty01")
    assert "\ufffd" in rec["facts"]["host"]["hostname"]  # the surrogate replaced at the boundary, not dropped
    ET.parse(out / "j.xml")  # well-formed XML: no control characters in it
    _assert_clean((out / "j.xml").read_text(), "junit")
    for line in (out / "m.prom").read_text().splitlines():
        assert line.startswith(("#", "fleetprobe_")), line  # no label value broke a line
    _assert_clean((out / "r.html").read_text(), "html")
    for fmt in ("csv", "yaml", "json", "table"):
        shown = run_cli(["show", run_dir.name, "--results", str(results), "--format", fmt,
                         *(["--show", "pcie,gpus"] if fmt == "table" else [])])
        assert shown.code in (0, 1, 4, 5) and shown.one_line_error() == "", (fmt, shown.stderr[-2000:])
        text = shown.stdout
        if fmt == "csv":
            for row in csv.reader(io.StringIO(text)):
                for cell in row:
                    for line in cell.splitlines() or [cell]:
                        assert not line.startswith(("=", "+", "-", "@")) or line.lstrip("-").replace(".", "").isdigit(), cell
                    assert not any(ord(c) < 32 and c not in "\t\r\n" for c in cell), repr(cell)
            text_lines = text.splitlines()
            assert all(not ln.startswith(("=", "+", "@")) for ln in text_lines), text_lines
        elif fmt == "yaml":
            yaml.safe_load(text)
        elif fmt == "json":
            json.loads(text)
        _assert_clean(text, fmt)


def test_an_inventory_name_with_a_lone_surrogate_is_one_clear_line_or_runs(tmp_path: Path) -> None:
    inv = tmp_path / "inv.yml"
    inv.write_text('all:\n  hosts:\n    "gpu\\ud800x":\n      ansible_connection: local\n    good01:\n'
                   '      ansible_connection: local\n')
    results = tmp_path / "results"
    res = run_cli(["run", "-i", str(inv), "--probe", "host", "--results", str(results)])
    assert res.code in (0, 2), (res.code, res.stderr[-2000:])
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr
    if res.code == 0:
        for cmd in (["show"], ["runs"], ["report", "-o", str(tmp_path / "r.html")]):
            again = run_cli([*cmd, "--results", str(results)])
            assert again.code in (0, 1) and "internal error" not in again.stderr, (cmd, again.stderr[-2000:])
