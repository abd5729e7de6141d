"""Hostile host output: whatever a host prints, the controller classifies it, keeps its memory
bounded, finishes on time, and never lets the host's bytes reach a terminal or a browser raw.

Each case runs the real CLI as a subprocess over the local transport (a real `/bin/sh -c` per
probe, the same caps and deadlines as SSH), with a hostile `ansible_python_interpreter` beside a
well-behaved host that must come through complete.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.support.hostile import (
    ESC,
    assert_good_host,
    envelope,
    envelope_printer,
    host_record,
    interpreter,
    inventory,
    load_fleet,
    only_run_dir,
    recorded,
    run_cli,
    strict_json,
    tree,
)

# The controller itself (Python, PyYAML, Jinja2, the fleet model) stays well under this; a host
# that could make it hold its 1 GB, or several copies of a 10 MB string per view, would not.
RSS_LIMIT_KIB = 400 * 1024


def _run(tmp_path: Path, hosts: dict[str, dict[str, Any]], *extra: str, probe: str = "host",
         timeout_s: float = 20, rss: bool = False) -> tuple[Any, Path, dict[str, Any]]:
    inv = inventory(tmp_path / "inventory.yml", hosts)
    results = tmp_path / "results"
    res = run_cli(["run", "-i", str(inv), "--probe", probe, "--results", str(results), "-t", str(timeout_s),
                   "--hosts", "all", *extra], measure_rss=(tmp_path / "rss") if rss else None)  # a row per host
    run_dir = only_run_dir(results)
    return res, run_dir, load_fleet(run_dir)


def test_unparseable_output_is_invalid_output_with_a_reason_and_the_good_host_is_kept(tmp_path: Path) -> None:
    bin_ = tmp_path / "bin"
    full = json.dumps(envelope("host", {"hostname": "x"}))
    hosts = {
        "good01": {},
        "text01": {"ansible_python_interpreter": str(interpreter(bin_, "text", "print('Welcome to host!')"))},
        "trunc01": {"ansible_python_interpreter": str(interpreter(
            bin_, "trunc", f"sys.stdout.write({full[: len(full) // 2]!r}); sys.stdout.flush(); os._exit(0)"))},
        "list01": {"ansible_python_interpreter": str(interpreter(bin_, "list", "print('[1, 2, 3]')"))},
        "shape01": {"ansible_python_interpreter": str(envelope_printer(
            bin_, "shape", {**envelope("host", {}), "data": "not an object"}))},
        "other01": {"ansible_python_interpreter": str(envelope_printer(bin_, "other", envelope("nvml", {})))},
        "two01": {"ansible_python_interpreter": str(interpreter(
            bin_, "two", f"print({full!r}); print({full!r})"))},
        "empty01": {"ansible_python_interpreter": str(interpreter(bin_, "empty", "sys.exit(0)"))},
        # valid-looking JSON that Python's parser turns into an exception or into a non-JSON value
        "bigint01": {"ansible_python_interpreter": str(interpreter(
            bin_, "bigint", "print('{\"envelope_version\": ' + '9' * 5000 + '}')"))},
        "deep01": {"ansible_python_interpreter": str(interpreter(bin_, "deep", "print('[' * 200000)"))},
        "nan01": {"ansible_python_interpreter": str(interpreter(
            bin_, "nan", f"print({full!r}.replace('0.01', 'NaN'))"))},
        "inf01": {"ansible_python_interpreter": str(interpreter(
            bin_, "inf", f"print({full!r}.replace('0.01', '1e400'))"))},
    }
    res, run_dir, fleet = _run(tmp_path, hosts)
    assert res.code == 4, res.stderr  # host problems, documented exit code
    assert res.one_line_error() == ""  # nothing for the user to fix on the controller side
    assert res.elapsed < 20
    assert_good_host(fleet, "good01")
    expected = {
        "text01": "not one JSON document",
        "trunc01": "not one JSON document",
        "list01": "must be a JSON object, got list",
        "shape01": "'data' must be an object",
        "other01": "envelope is for probe 'nvml', expected 'host'",
        "two01": "not one JSON document",
        "empty01": "printed nothing on stdout",
        "bigint01": "not usable JSON (Exceeds the limit (4300 digits)",
        "deep01": "nested too deeply",
        "nan01": "non-standard JSON constant NaN",
        "inf01": "number 1e400 is out of range",
    }
    for name, reason in expected.items():
        rec = host_record(fleet, name)
        assert rec["outcome"] == "invalid_output", (name, rec)
        assert reason in rec["reason"] and "\n" not in rec["reason"], (name, rec["reason"])
        assert rec["facts"] == {}
    # the raw bytes are kept for a human to look at
    assert (run_dir / "raw" / "text01" / "host.stdout").read_bytes() == b"Welcome to host!\n"
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("text01 "))
    assert "invalid_output: stdout is not one JSON document" in line  # the user sees why, on one line


def _absurd_host_data() -> dict[str, Any]:
    data = copy.deepcopy(recorded("dgx-h100-01", "host")["data"])
    data["cpu"].update(cores=-4, sockets=10**9, threads="lots")
    data["memory"] = {"total_bytes": -1}
    data["numa"] = {"nodes": [{"node": -7, "cpulist": "0-" + "9" * 500}]}
    data["hostname"] = "h" * (10 * 1024 * 1024)  # 10 MB, under the 16 MiB output cap
    data["os"] = {"pretty_name": ["not", "a", "string"], "id": {"deep": {"er": [1, 2]}}}
    # absurd but within the figure budget: past it (1e308) the whole answer is refused as forged
    # (tests/reliability/test_roads_import.py), which this test is not about
    data["uptime_s"] = 1e17
    return data


def _absurd_nvml_data() -> dict[str, Any]:
    data = copy.deepcopy(recorded("dgx-h100-01", "nvml")["data"])
    data["count"] = 10**9
    gpu = data["gpus"][0]
    gpu.update(memory_total_bytes=-(10**30), temperature_c=10**9, power_w=-1e17, index=-3,
               name="N" * (1024 * 1024), pcie={"gen_current": 10**9, "width_current": -16})
    gpu["ecc"] = "corrupt"
    data["gpus"][1] = "not a gpu"
    data["levels"] = [[10**9]]
    return data


def test_absurd_values_do_not_crash_or_bloat_the_controller(tmp_path: Path) -> None:
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    (bin_ / "host.json").write_text(json.dumps(envelope("host", _absurd_host_data())))
    (bin_ / "nvml.json").write_text(json.dumps(envelope("nvml", _absurd_nvml_data())))
    # one interpreter answering for both probes, by the probe it is sent
    absurd = interpreter(bin_, "absurd", (
        "src = sys.stdin.buffer.read()\n"
        "name = 'nvml' if b\"PROBE_NAME = 'nvml'\" in src or b'PROBE_NAME = \"nvml\"' in src else 'host'\n"
        f"sys.stdout.write(open(os.path.join({str(bin_)!r}, name + '.json')).read())"), read_stdin=False)
    # well-formed envelopes whose sections have the wrong shape entirely
    misshapen = bin_ / "misshapen"
    (bin_ / "m").mkdir()
    (bin_ / "m" / "host.json").write_text(json.dumps(envelope("host", {"cpu": "many", "memory": [1], "numa": 7})))
    (bin_ / "m" / "nvml.json").write_text(json.dumps(envelope("nvml", {"gpus": "eight", "count": {"n": 8}})))
    misshapen = interpreter(bin_, "misshapen", (
        "src = sys.stdin.buffer.read()\n"
        "name = 'nvml' if b\"PROBE_NAME = 'nvml'\" in src or b'PROBE_NAME = \"nvml\"' in src else 'host'\n"
        f"sys.stdout.write(open(os.path.join({str(bin_ / 'm')!r}, name + '.json')).read())"), read_stdin=False)
    html = tmp_path / "report.html"
    inv = inventory(tmp_path / "inventory.yml", {"good01": {}, "absurd01": {"ansible_python_interpreter": str(absurd)},
                                                 "shape01": {"ansible_python_interpreter": str(misshapen)}})
    results = tmp_path / "results"
    res = run_cli(["run", "-i", str(inv), "--probe", "host", "--probe", "nvml", "--results", str(results),
                   "-t", "20", "--show", "gpus,pcie,topo", "--html", str(html)], measure_rss=tmp_path / "rss")
    assert res.code in (0, 1, 4, 5), res.stderr
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr[-3000:]
    assert res.elapsed < 40
    assert res.rss_kib is not None and res.rss_kib < RSS_LIMIT_KIB, res.rss_kib
    run_dir = only_run_dir(results)
    fleet = load_fleet(run_dir)
    for doc in ("fleet.json", "findings.json", "run.json"):
        strict_json(run_dir / doc)
    rec = host_record(fleet, "absurd01")
    assert rec["probes"]["host"]["outcome"] == "ok"  # the envelope itself is well-formed
    # sections of the wrong shape are reported as malformed data, not believed and not fatal
    malformed = [f for f in fleet["findings"] if f["id"] == "probe.data.malformed" and f["host"] == "shape01"]
    assert malformed and all(f["severity"] == "warn" for f in malformed), fleet["findings"]
    # no 10 MB line reaches the terminal: every line of the table is bounded
    assert max(len(line) for line in res.stdout.splitlines()) < 2000
    assert "absurd01" in res.stdout and "shape01" in res.stdout
    # the good host is untouched by its neighbours
    good = host_record(fleet, "good01")
    assert good["probes"]["host"]["outcome"] == "ok" and good["facts"]["host"]["kernel"] == os.uname().release
    assert html.is_file() and html.stat().st_size < 64 * 1024 * 1024


def test_a_gigabyte_on_stdout_is_cut_at_the_cap_without_holding_it(tmp_path: Path) -> None:
    bin_ = tmp_path / "bin"
    flood = interpreter(bin_, "flood", (
        "chunk = b'x' * (1 << 20)\n"
        "for _ in range(1024):\n"
        "    sys.stdout.buffer.write(chunk)\n"))
    res, run_dir, fleet = _run(tmp_path, {"good01": {}, "flood01": {"ansible_python_interpreter": str(flood)}},
                               rss=True)
    rec = host_record(fleet, "flood01")
    assert rec["outcome"] == "invalid_output"
    assert f"exceeded the {16 * 1024 * 1024}-byte cap" in rec["reason"]
    assert res.rss_kib is not None and res.rss_kib < RSS_LIMIT_KIB, res.rss_kib
    assert res.elapsed < 30
    assert_good_host(fleet, "good01")
    # what was read is not stored: the run directory stays small
    size = sum(p.stat().st_size for p in run_dir.rglob("*") if p.is_file())
    assert size < 2 * 1024 * 1024, size


def test_endless_stderr_times_out_with_stderr_capped(tmp_path: Path) -> None:
    bin_ = tmp_path / "bin"
    chatty = interpreter(bin_, "chatty", (
        "line = b'warning: something odd ' * 40 + b'\\n'\n"
        "while True:\n"
        "    sys.stderr.buffer.write(line)\n"))
    res, run_dir, fleet = _run(tmp_path, {"good01": {}, "chatty01": {"ansible_python_interpreter": str(chatty)}},
                               timeout_s=3, rss=True)
    rec = host_record(fleet, "chatty01")
    assert rec["outcome"] == "timeout"
    assert rec["reason"] == "probe did not finish within 3s"
    assert 2.5 < res.elapsed < 20, res.elapsed
    assert res.rss_kib is not None and res.rss_kib < RSS_LIMIT_KIB
    kept = run_dir / "raw" / "chatty01" / "host.stderr"
    assert kept.is_file() and 0 < kept.stat().st_size <= 64 * 1024
    assert_good_host(fleet, "good01")


_NASTY = "\x1b]0;owned\x07\x1b[2J\x1b[31mred\x1b[0m\x07\x08\x9b31m\u202eevil\r\nline2"


def test_escape_sequences_never_reach_the_terminal(tmp_path: Path) -> None:
    bin_ = tmp_path / "bin"
    data = copy.deepcopy(recorded("dgx-h100-01", "host")["data"])
    data.update(hostname=_NASTY, kernel=_NASTY)
    data["os"] = {"pretty_name": _NASTY, "id": "ubuntu", "version_id": "22.04"}
    data["nvidia_driver"] = {"loaded": True, "raw": _NASTY, "version": _NASTY}
    hosts = {
        "good01": {},
        "esc01": {"ansible_python_interpreter": str(envelope_printer(bin_, "esc", envelope("host", data)))},
        # an error path: the reason carries the host's stderr and a snippet of its stdout
        "escerr01": {"ansible_python_interpreter": str(interpreter(
            bin_, "escerr", f"sys.stderr.write({_NASTY!r}); print({_NASTY!r}); sys.exit(1)"))},
        "escfail01": {"ansible_python_interpreter": str(envelope_printer(
            bin_, "escfail", envelope("host", {}, status="error", errors=[_NASTY])))},
    }
    res, run_dir, fleet = _run(tmp_path, hosts, "--show", "pcie,gpus")
    assert ESC not in res.stdout and ESC not in res.stderr
    assert "\x9b" not in res.stdout and "\u202e" not in res.stdout
    assert "\x07" not in res.stdout and "\x08" not in res.stdout
    assert "esc01" in res.stdout and "escerr01" in res.stdout
    assert host_record(fleet, "escerr01")["outcome"] == "invalid_output"
    assert host_record(fleet, "escfail01")["outcome"] == "failed"
    assert_good_host(fleet, "good01")
    # stored runs re-rendered later are just as clean
    for cmd in (["show", run_dir.name], ["show", run_dir.name, "-v"], ["runs"]):
        again = run_cli([*cmd, "--results", str(run_dir.parent)])
        assert again.code in (0, 1, 4, 5), again.stderr
        assert again.stdout and ESC not in again.stdout and ESC not in again.stderr


_SCRIPT = "</script><script>alert('pwned')</script><img src=x onerror=alert(1)>"


def test_script_tags_are_escaped_in_the_html_report(tmp_path: Path) -> None:
    bin_ = tmp_path / "bin"
    data = copy.deepcopy(recorded("dgx-h100-01", "host")["data"])
    data.update(hostname=_SCRIPT, kernel=_SCRIPT)
    data["os"] = {"pretty_name": _SCRIPT, "id": "ubuntu", "version_id": "22.04"}
    hosts = {
        "good01": {},
        "xss01": {"ansible_python_interpreter": str(envelope_printer(bin_, "xss", envelope("host", data)))},
        "xsserr01": {"ansible_python_interpreter": str(interpreter(bin_, "xsserr", f"print({_SCRIPT!r})"))},
    }
    html = tmp_path / "live.html"
    res, run_dir, fleet = _run(tmp_path, hosts, "--html", str(html))
    assert res.code in (0, 1, 4, 5) and "Traceback" not in res.stderr, res.stderr
    assert_good_host(fleet, "good01")
    later = tmp_path / "later.html"
    again = run_cli(["report", run_dir.name, "--results", str(run_dir.parent), "-o", str(later)])
    assert again.code == 0, again.stderr
    for page in (html, later):
        text = page.read_text()
        assert "xss01" in text
        assert "<script>alert" not in text and "<img src=x" not in text
        assert "alert(&#39;pwned&#39;)" in text or "alert(\\u0027pwned\\u0027)" in text or "&lt;script&gt;" in text


def test_path_like_host_names_and_hostname_facts_never_escape_the_run_directory(tmp_path: Path) -> None:
    bin_ = tmp_path / "bin"
    data = copy.deepcopy(recorded("dgx-h100-01", "host")["data"])
    data["hostname"] = "../../../../etc/x"
    liar = envelope_printer(bin_, "liar", envelope("host", data))
    work = tmp_path / "work"
    work.mkdir()
    names = ["../../etc/x", "/abs/path", "..", ".hidden", "a/../../b", "nul\\x", "good01"]
    hosts: dict[str, dict[str, Any]] = {n: {} for n in names}
    hosts["liar01"] = {"ansible_python_interpreter": str(liar)}
    before = tree(tmp_path)
    inv = inventory(tmp_path / "inventory.yml", hosts)
    results = work / "results"
    res = run_cli(["run", "-i", str(inv), "--probe", "host", "--results", str(results)])
    assert "Traceback" not in res.stderr, res.stderr
    run_dir = only_run_dir(results)
    fleet = load_fleet(run_dir)
    assert {h["name"] for h in fleet["hosts"]} == set(hosts)
    for name in names:
        assert host_record(fleet, name)["outcome"] == "ok", name
    # every file the run wrote is inside the run directory (and the lock beside it)
    assert tree(tmp_path) - before - tree(results) == {"inventory.yml", "work/results"} | {
        f"work/results/{p}" for p in tree(results)}
    assert {p for p in tree(results) if not p.startswith(run_dir.name)} == {".fleetprobe.lock"}
    for p in run_dir.rglob("*"):
        assert p.resolve().is_relative_to(run_dir.resolve()), p
    raw = {p.name for p in (run_dir / "raw").iterdir()}
    assert len(raw) == len(hosts)  # one directory per host, none merged into another
    assert all("/" not in r and r not in (".", "..") and not r.startswith(".") for r in raw), raw
    # the stored run reads back under the original names
    shown = run_cli(["show", run_dir.name, "--results", str(results), "--hosts", "all"])  # every host's row
    assert shown.code in (0, 1, 4, 5) and "../../etc/x" in shown.stdout, shown.stderr


@pytest.mark.parametrize("rendering", ["json", "csv"])
def test_machine_readable_output_survives_hostile_strings(tmp_path: Path, rendering: str) -> None:
    bin_ = tmp_path / "bin"
    data = copy.deepcopy(recorded("dgx-h100-01", "host")["data"])
    data.update(hostname=_NASTY + _SCRIPT, kernel='"; DROP TABLE hosts; --,\n=cmd|" /C calc\'!A0')
    hosts = {"good01": {}, "odd01": {"ansible_python_interpreter": str(envelope_printer(
        bin_, "odd", envelope("host", data)))}}
    res, _, fleet = _run(tmp_path, hosts, "--format", rendering)
    assert "Traceback" not in res.stderr and res.stdout, res.stderr
    if rendering == "json":
        assert json.loads(res.stdout)["summary"]["hosts"] == 2  # still one valid document
    assert_good_host(fleet, "good01")
