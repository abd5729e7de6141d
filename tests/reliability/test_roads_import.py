"""The import roads (docs/reliability.md "Roads in"): evidence text, bundle documents and
ansible-runner job events.  Each input is read within a bound and only if it is a regular file;
what it holds is type-checked and strict JSON comes out; a bad input costs only itself."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.api.collected import MAX_DOCUMENT
from tests.support.hostile import cli_env, only_run_dir, recorded, run_cli, strict_json
from tests.support.interrupt import terminate_at_work

ROOT = Path(__file__).resolve().parents[2]
TOPO = ROOT / "tests" / "fixtures" / "text" / "h200_real_topo_m.txt"


def _import(tmp_path: Path, *args: str, **kw: Any) -> Any:
    return run_cli(["import", "--results", str(tmp_path / "results"), *args], timeout=kw.pop("timeout", 120), **kw)


def _strict_stdout(text: str) -> Any:
    def refuse(name: str) -> None:
        raise AssertionError(f"--format json printed the non-JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


# ------------------------------------------------------------------------------ files that are not files


def test_a_fifo_given_as_evidence_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "topo.txt"
    os.mkfifo(fifo)
    got = _import(tmp_path, str(fifo), timeout=60)
    assert got.code == 2 and "topo.txt" in got.stderr and "regular file" in got.stderr, got.stderr


def test_a_fifo_beside_good_evidence_costs_only_itself(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet"
    (fleet / "gpu01").mkdir(parents=True)
    (fleet / "gpu01" / "topo.txt").write_bytes(TOPO.read_bytes())
    os.mkfifo(fleet / "gpu01" / "stuck.txt")
    got = _import(tmp_path, "--fleet", str(fleet), "--format", "json", timeout=60)
    assert got.code in (0, 1, 4, 5), got.stderr
    doc = _strict_stdout(got.stdout)
    assert [h["name"] for h in doc["hosts"]] == ["gpu01"]
    assert "topology" in doc["hosts"][0]["facts"]
    assert "stuck.txt" in got.stdout + got.stderr


def test_a_fifo_named_like_a_job_event_is_skipped(tmp_path: Path) -> None:
    events = tmp_path / "art" / "job_events"
    events.mkdir(parents=True)
    _event(events, 1, "gpu01", _host_res())
    os.mkfifo(events / "2-stuck.json")
    got = _import(tmp_path, "--ansible-runner", str(tmp_path / "art"), "--format", "json", timeout=60)
    assert got.code in (0, 1, 4, 5), got.stderr
    assert [h["name"] for h in _strict_stdout(got.stdout)["hosts"]] == ["gpu01"]


# ------------------------------------------------------------------------------ bounded reads


def test_a_bundle_document_past_its_cap_is_refused_unread(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    with open(docs / "gpu01.json", "wb") as f:
        f.truncate(MAX_DOCUMENT + 1)  # sparse: costs no disk
    got = _import(tmp_path, str(docs), measure_rss=tmp_path / "rss", timeout=120)
    assert got.code in (2, 4), got.stderr
    assert f"{MAX_DOCUMENT:,}" in got.stdout + got.stderr
    assert got.rss_kib is not None and got.rss_kib < 250_000, f"{got.rss_kib} KiB for a refused document"


def test_a_bundle_document_of_millions_of_values_is_refused_before_they_are_built(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    body = ",".join(["[]"] * 5_000_000)  # 15 MB; as Python lists it would be ~400 MB
    (docs / "gpu01.json").write_text('{"fleetprobe_bundle": 1, "junk": [' + body + "]}")
    got = _import(tmp_path, str(docs), measure_rss=tmp_path / "rss", timeout=120)
    assert got.code in (2, 4) and "Traceback" not in got.stderr, got.stderr
    assert "values" in got.stdout + got.stderr
    assert got.rss_kib is not None and got.rss_kib < 250_000, f"{got.rss_kib} KiB"


@pytest.mark.parametrize("plan", [{"playbook": 123}, {"playbook": ["audit"]}, {"timeout": "abc"}, {"timeout": [1]},
                                  {"timeout": 10**400}, {"forks": 10**400}, {"forks": 2.5}, {"expect": "gpu_count=8"},
                                  {"limit": 5}, {"become": "yes"}, {"probes": [1, None]}])
def test_a_document_whose_plan_is_malformed_costs_only_that_file(tmp_path: Path, plan: dict[str, Any]) -> None:
    """The plan a bundle was written from is read from each document: a field of the wrong type
    makes that file unreadable, said under its own name, and the other documents are judged."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, doc_plan in (("a-good", {}), ("b-forged", plan)):
        doc = _document(name)
        doc["plan"] = {**doc["plan"], **doc_plan}
        (docs / f"{name}.json").write_text(json.dumps(doc))
    got = _import(tmp_path, str(docs), "--format", "json")
    assert got.code in (1, 4, 5) and "Traceback" not in got.stderr, got.stderr
    hosts = {h["name"]: h for h in _strict_stdout(got.stdout)["hosts"]}
    assert hosts["a-good"]["probes"]["host"]["outcome"] == "ok"
    reason = hosts["b-forged.json"]["probes"]["bundle"]["reason"]
    assert "b-forged.json: the document's plan is malformed" in reason and next(iter(plan)) in reason, reason
    assert "None" not in reason, reason  # the document's values as JSON writes them: null, not Python's None


def test_expectations_a_document_asks_that_this_version_cannot_read_are_one_message_or_replaced(
        tmp_path: Path) -> None:
    """A bundle from a newer fleetprobe may expect what this one has no name for: the import says
    so in one message, and judges with --expect given instead."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("a", "b"):
        doc = _document(name)
        doc["plan"]["expect"] = ["gpu_count=many", "a_newer_key=1"]
        (docs / f"{name}.json").write_text(json.dumps(doc))
    got = _import(tmp_path, str(docs))
    assert got.code == 2 and "Traceback" not in got.stderr, got.stderr
    assert "the documents' plan expects" in got.stderr and "give --expect" in got.stderr, got.stderr
    got = _import(tmp_path, str(docs), "--expect", "gpu_count=8", "--format", "json")
    assert got.code == 0, got.stderr
    assert {h["name"]: h["expect"].get("gpu_count") for h in _strict_stdout(got.stdout)["hosts"]} == {"a": 8, "b": 8}


def _unreadable_playbook(tmp_path: Path, kind: str) -> str:
    """A path a forged or stale plan may name, that is no playbook this controller can read."""
    if kind == "fifo":
        os.mkfifo(tmp_path / "plan.yml")
        return str(tmp_path / "plan.yml")
    if kind == "huge":
        with open(tmp_path / "huge.yml", "wb") as f:
            f.truncate(64 << 20)  # sparse: costs no disk
        return str(tmp_path / "huge.yml")
    if kind == "directory":
        return str(tmp_path)
    if kind == "escapes":  # a forged path that would clear the terminal and ring its bell
        return str(tmp_path / "\x1b[2Jsite\x07.yml")
    return str(tmp_path / "gone" / "site.yml")


UNUSABLE_PLANS = [{"probes": ["host", "a_newer_probe"]}, {"playbook": "fifo"}, {"playbook": "huge"},
                  {"playbook": "directory"}, {"playbook": "missing"}, {"playbook": "escapes"}]


def _with_plan(tmp_path: Path, plan: dict[str, Any]) -> dict[str, Any]:
    if "playbook" in plan:
        return {"playbook": _unreadable_playbook(tmp_path, plan["playbook"])}
    return plan


@pytest.mark.parametrize("plan", UNUSABLE_PLANS, ids=lambda p: str(next(iter(p.values()))))
def test_a_document_whose_plan_cannot_be_used_here_costs_only_its_plan(tmp_path: Path, plan: dict[str, Any]) -> None:
    """The first document's plan (first among as many) names a probe this fleetprobe has no name
    for, or a playbook it cannot read here (a FIFO, 64 MB, a directory, a path that is gone): the
    documents are judged under the plan the other was written from, every host is kept, and a
    warning says so; the controller neither blocks on the FIFO nor reads the big file."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, doc_plan in (("a-odd", _with_plan(tmp_path, plan)), ("b-good", {})):
        doc = _document(name)
        doc["plan"] = {**doc["plan"], **doc_plan}
        (docs / f"{name}.json").write_text(json.dumps(doc))
    got = _import(tmp_path, str(docs), "--format", "json", measure_rss=tmp_path / "rss", timeout=120)
    assert got.code == 0 and "Traceback" not in got.stderr, got.stderr
    hosts = {h["name"]: h for h in _strict_stdout(got.stdout)["hosts"]}
    assert set(hosts) == {"a-odd", "b-good"}
    assert all(h["probes"]["host"]["outcome"] == "ok" for h in hosts.values())
    assert "1 document(s) come from a bundle whose plan this fleetprobe cannot use" in got.stderr, got.stderr
    assert "judged under the plan of 1 other document(s)" in got.stderr, got.stderr
    assert "\x1b" not in got.stderr and "\x07" not in got.stderr, got.stderr
    assert got.rss_kib is not None and got.rss_kib < 250_000, f"{got.rss_kib} KiB"


@pytest.mark.parametrize("plan", UNUSABLE_PLANS, ids=lambda p: str(next(iter(p.values()))))
def test_documents_that_all_name_a_plan_unusable_here_are_one_message(tmp_path: Path, plan: dict[str, Any]) -> None:
    """No document's plan can be used: one message that names what is wrong and what to do (-p for
    a playbook; a newer fleetprobe for a probe); with -p the playbook's are judged."""
    docs = tmp_path / "docs"
    docs.mkdir()
    forged = _with_plan(tmp_path, plan)
    for name in ("a", "b"):
        doc = _document(name)
        doc["plan"] = {**doc["plan"], **forged}
        (docs / f"{name}.json").write_text(json.dumps(doc))
    got = _import(tmp_path, str(docs), timeout=120)
    assert got.code == 2 and "Traceback" not in got.stderr, got.stderr
    assert got.stderr.count("\n") == 1 and "the documents' plan cannot be used here" in got.stderr, got.stderr
    assert "\x1b" not in got.stderr and "\x07" not in got.stderr, got.stderr
    if "playbook" in plan:
        assert "give -p PLAYBOOK" in got.stderr, got.stderr
        got = _import(tmp_path, str(docs), "-p", "quick", "--format", "json", timeout=120)
        assert got.code == 0, got.stderr
        assert sorted(h["name"] for h in _strict_stdout(got.stdout)["hosts"]) == ["a", "b"]
    else:
        assert "a_newer_probe" in got.stderr and "newer fleetprobe" in got.stderr, got.stderr


@pytest.mark.parametrize("expect", [["gpu_count=" + "1" * 5000], ["foo\nwarning: forged=1"]],
                         ids=["5000-digit", "newline"])
def test_a_plan_expecting_what_no_expectation_is_costs_its_plan_in_one_line(tmp_path: Path,
                                                                            expect: list[str]) -> None:
    """A forged plan's expectation of 5,000 digits (past what Python reads as an int) or with a line
    break that would print a forged line: the documents are judged under the other plan, the
    warning is one line; when every document has it, one line saying to give --expect."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name, doc_expect in (("a-odd", expect), ("b-good", [])):
        doc = _document(name)
        doc["plan"] = {**doc["plan"], "expect": doc_expect}
        (docs / f"{name}.json").write_text(json.dumps(doc))
    got = _import(tmp_path, str(docs), "--format", "json")
    assert got.code == 0 and "Traceback" not in got.stderr, got.stderr
    assert sorted(h["name"] for h in _strict_stdout(got.stdout)["hosts"]) == ["a-odd", "b-good"]
    assert len(got.stderr.splitlines()) == 1, got.stderr  # the one warning, no forged line after it
    assert got.stderr.startswith("warning: 1 document(s) come from a bundle whose plan"), got.stderr
    (docs / "b-good.json").unlink()
    got = _import(tmp_path, str(docs))
    assert got.code == 2 and got.stderr.count("\n") == 1, got.stderr
    assert "the documents' plan expects what this fleetprobe cannot read" in got.stderr, got.stderr
    assert "give --expect" in got.stderr, got.stderr


def test_an_inventory_error_is_the_inventorys_not_the_documents_plan(tmp_path: Path) -> None:
    """-i names an inventory whose probe_expect has a typo: the import says so in its own words,
    not as a fault of the documents' plan (every plan would fail alike)."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for name in ("a", "b"):
        (docs / f"{name}.json").write_text(json.dumps(_document(name)))
    inv = tmp_path / "inv.yml"
    inv.write_text("all:\n  hosts:\n    a:\n      probe_expect: {gpu_cnt: 8}\n    b: {}\n")
    got = _import(tmp_path, str(docs), "-i", str(inv))
    assert got.code == 2 and "Traceback" not in got.stderr, got.stderr
    assert "gpu_cnt" in got.stderr and "the documents' plan" not in got.stderr, got.stderr


def _document(name: str) -> dict[str, Any]:
    out = json.dumps(recorded("dgx-h100-12", "host"))
    return {"fleetprobe_bundle": 1, "identity": {"hostname": name}, "for_host": None,
            "plan": {"playbook": "audit", "probes": ["host"], "expect": [], "timeout": 60.0},
            "calls": [{"name": "host", "args": {}, "timeout_s": 60.0}],
            "probes": [{"probe": "host", "state": "ran", "exit": 0, "timed_out": False, "out_trunc": False,
                        "err_trunc": False, "duration_s": 0.05, "out": len(out.encode()), "err": 0,
                        "stdout": {"text": out}, "stderr": {"text": ""}}]}


# ------------------------------------------------------------------------------ text as users save it


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-16-le-bom", "utf-16-be-bom", "crlf"])
def test_evidence_saved_with_a_bom_or_as_utf16_reads_like_the_plain_file(tmp_path: Path, encoding: str) -> None:
    text = TOPO.read_text()
    if encoding == "utf-16-le-bom":
        data = b"\xff\xfe" + text.encode("utf-16-le")
    elif encoding == "utf-16-be-bom":
        data = b"\xfe\xff" + text.encode("utf-16-be")
    elif encoding == "crlf":
        data = text.replace("\n", "\r\n").encode()
    else:
        data = text.encode(encoding)  # utf-16: PowerShell's `>` (a BOM, then little-endian)
    (tmp_path / "gpu01.txt").write_bytes(data)
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "gpu01.txt").write_bytes(text.encode())
    saved = _import(tmp_path, str(tmp_path / "gpu01.txt"), "--format", "json")
    plain = run_cli(["import", "--results", str(tmp_path / "r2"), str(tmp_path / "plain" / "gpu01.txt"),
                     "--format", "json"], timeout=120)
    assert saved.code == plain.code, saved.stderr
    got, want = _strict_stdout(saved.stdout)["hosts"][0], _strict_stdout(plain.stdout)["hosts"][0]
    assert got["facts"]["topology"]["matrix"] == want["facts"]["topology"]["matrix"]
    assert got["outcome"] == "ok"


def test_a_benchmark_naming_300_gpus_is_cut_to_the_gpu_budget(tmp_path: Path) -> None:
    n = 300
    rows = ["nvbandwidth Version: v0.10.0", "", "Running device_to_device_memcpy_read_ce.",
            "memcpy CE GPU(row) -> GPU(column) bandwidth (GB/s)", "   " + "".join(f"{j:>10}" for j in range(n))]
    rows += [f"{i:>3}" + "".join(f"{'N/A' if i == j else f'{300 + (i * 7 + j) % 90:.2f}':>10}" for j in range(n))
             for i in range(n)]
    (tmp_path / "gpu01.txt").write_text("\n".join([*rows, "", "SUM device_to_device_memcpy_read_ce 1.0", ""]))
    got = _import(tmp_path, str(tmp_path / "gpu01.txt"), "--format", "json", timeout=300)
    assert got.code in (0, 1), got.stderr
    host = _strict_stdout(got.stdout)["hosts"][0]
    assert len(host["facts"]["p2p"]["gpus"]) == 64
    assert "beyond the 64" in got.stdout + got.stderr


# ------------------------------------------------------------------------------ forged Ansible events


def _host_res(**answer: Any) -> dict[str, Any]:
    env = recorded("dgx-h100-01", "host")
    return {"envelope": env, "invocation": {"module_args": {"timeout": 30}},
            "fleetprobe_answer": {"probe": "host", "exit": 0, "timed_out": False, "out_trunc": False,
                                  "err_trunc": False, "duration_s": 0.2, "stderr": "", **answer}}


def _event(events: Path, counter: int, host: str, res: dict[str, Any], probe: str = "host") -> None:
    text = json.dumps({"counter": counter, "event": "runner_on_ok",
                       "event_data": {"host": host, "task_action": f"fleetprobe.gpu.{probe}", "res": res}})
    (events / f"{counter}-{host}.json").write_text(text)  # json.dumps writes NaN/Infinity as Python does


@pytest.mark.parametrize("duration", [-1.0, float("nan"), float("inf"), float("-inf"), 1e300, "12"])
def test_a_forged_duration_costs_that_probe_and_fleet_json_stays_strict(tmp_path: Path, duration: Any) -> None:
    events = tmp_path / "art" / "job_events"
    events.mkdir(parents=True)
    _event(events, 1, "good", _host_res())
    _event(events, 2, "forged", _host_res(duration_s=duration))
    got = _import(tmp_path, "--ansible-runner", str(tmp_path / "art"), "--format", "json")
    assert got.code == 4, got.stderr
    hosts = {h["name"]: h for h in _strict_stdout(got.stdout)["hosts"]}
    assert hosts["good"]["probes"]["host"]["outcome"] == "ok"
    forged = hosts["forged"]["probes"]["host"]
    assert forged["outcome"] == "failed" and "duration_s" in forged["reason"], forged
    strict_json(only_run_dir(tmp_path / "results") / "fleet.json")


@pytest.mark.parametrize("figure", [1e308, 1.7e308, 1e19])
def test_figures_that_would_overflow_when_averaged_are_refused_as_a_forged_answer(tmp_path: Path,
                                                                                  figure: float) -> None:
    env = recorded("dgx-h100-12", "nccl")
    for r in env["data"]["results"]:
        r["busbw_gbps"] = r["algbw_gbps"] = figure
    res = {"envelope": env, "invocation": {"module_args": {"timeout": 60}},
           "fleetprobe_answer": {"probe": "nccl", "exit": 0, "timed_out": False, "out_trunc": False,
                                 "err_trunc": False, "duration_s": 1.0, "stderr": ""}}
    events = tmp_path / "art" / "job_events"
    events.mkdir(parents=True)
    _event(events, 1, "gpu01", _host_res())
    _event(events, 2, "gpu01", res, probe="nccl")
    got = _import(tmp_path, "--ansible-runner", str(tmp_path / "art"), "--format", "json")
    assert got.code in (4, 5), got.stderr
    host = _strict_stdout(got.stdout)["hosts"][0]
    assert host["probes"]["host"]["outcome"] == "ok"
    assert host["probes"]["nccl"]["outcome"] == "invalid_output", host["probes"]["nccl"]
    assert "out of range" in host["probes"]["nccl"]["reason"]
    doc = strict_json(only_run_dir(tmp_path / "results") / "fleet.json")
    assert "Infinity" not in json.dumps(doc)


# ------------------------------------------------------------------------------ the process environment


def test_a_state_home_that_is_a_file_is_one_message_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "state"
    blocker.write_text("")
    env = cli_env(XDG_STATE_HOME=str(blocker))
    (tmp_path / "gpu01.txt").write_bytes(TOPO.read_bytes())
    for args in (["import", str(tmp_path / "gpu01.txt")], ["run", "-q"], ["runs"], ["show"], ["rejudge", "latest"]):
        got = run_cli(args, timeout=120, env=env)
        assert got.code == 2, (args, got.stderr)
        assert "XDG_STATE_HOME" in got.stderr and "Traceback" not in got.stderr, (args, got.stderr)


def test_sigterm_ends_an_import_with_130(tmp_path: Path) -> None:
    fleet = tmp_path / "fleet"
    for i in range(400):  # enough evidence that the import is still at work when the signal comes
        (fleet / f"h{i:03d}").mkdir(parents=True)
        (fleet / f"h{i:03d}" / "topo.txt").write_bytes(TOPO.read_bytes())
    code, err = terminate_at_work([sys.executable, "-m", "orchestrator", "import", "--fleet", str(fleet),
                                   "--results", str(tmp_path / "results"), "-q"], cli_env(), str(ROOT))
    assert code == 130, err[-2000:]
    assert "Traceback" not in err
