"""Fleet baselines on simulated fleets: copies of a recorded DGX H100 (p2p and nccl probes, the fake
libcuda's figures) with a little measurement noise, one host or one GPU planted 8-15 % low.  The
planted one is found, with the class median and the peer count; a uniform fleet of the same size
raises nothing; a class with too few peers is not judged, and says why.  Then the same against an
exported class baseline: three hosts judged against a known-good fleet."""

from __future__ import annotations

import copy
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engine.results import HostInput
from orchestrator.store.runmeta import RunMeta
from orchestrator.verdict import baseline
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.judge import build_fleet
from orchestrator.verdict.references import References
from orchestrator.verdict.result import FleetResult
from tests.verdict.test_verdict_demo import run_cli

REPO = Path(__file__).resolve().parents[2]
RECORDINGS = REPO / "orchestrator" / "demo" / "recordings"
BASE_HOST = "dgx-h100-12"  # a healthy DGX H100 recorded with the p2p and nccl probes
GPU3 = "0000:5d:00.0"


def _recorded() -> dict[str, dict[str, Any]]:
    data = {}
    for path in sorted((RECORDINGS / BASE_HOST).glob("*.json")):
        env = json.loads(path.read_text())
        assert env["status"] == "ok", path
        data[env["probe"]] = env["data"]
    assert data["p2p"]["gpus"][0].get("load"), "the recording predates p2p 1.1's readings under load"
    return data


def _host(name: str, rng: random.Random, factor: float = 1.0, gpu: int | None = None) -> HostInput:
    """A copy of the recorded host with +-2 % noise on every figure; `factor` on every figure of
    the host (gpu None) or of one GPU: its host links, its local copy and every pair it is in."""
    data = copy.deepcopy(_recorded())

    def noisy(v: float, planted: bool) -> float:
        return round(v * (factor if planted else 1.0) * (1 + rng.uniform(-0.02, 0.02)), 2)

    for g in data["p2p"]["gpus"]:
        planted = gpu is None or g["index"] == gpu
        for key in ("h2d_gbps", "d2h_gbps", "local_ce_gbps"):
            g[key] = noisy(g[key], planted)
    for p in data["p2p"]["pairs"]:
        p["ce_gbps"] = noisy(p["ce_gbps"], gpu is None or gpu in (p["src"], p["dst"]))
    for r in data["nccl"]["results"]:
        if isinstance(r.get("busbw_gbps"), (int, float)):
            r["busbw_gbps"] = noisy(r["busbw_gbps"], gpu is None)
    _own_identity(data, name)
    probes = {p: {"outcome": "ok", "reason": ""} for p in data}
    return HostInput(name=name, address=name, groups=["gpu"], probes=probes, data=data)


def _own_identity(data: dict[str, Any], name: str) -> None:
    """Each copy its own hostname, serials and GPU UUIDs: machines, not one machine listed twice
    (which the identity checks fail, and a failed host is no baseline)."""
    data["host"]["hostname"] = name
    for key in ("product_serial", "board_serial", "product_uuid", "chassis_serial"):
        if isinstance(data["host"]["dmi"].get(key), str):
            data["host"]["dmi"][key] = f"{key}-{name}"
    for i, g in enumerate(data["nvml"]["gpus"]):
        g["uuid"], g["serial"] = f"GPU-{name}-{i}", f"{name}-{i}"


def _fleet(hosts: list[HostInput], refs: References | None = None) -> FleetResult:
    return build_fleet(RunMeta(id="t"), hosts, lambda h: Expectations(), refs=refs, workers=1)


def _baseline(fleet: FleetResult) -> list[Any]:
    return [f for f in fleet.findings if f.id.startswith("baseline.")]


@pytest.mark.parametrize("factor", [0.92, 0.88, 0.85])
def test_a_host_planted_low_is_found_with_the_class_median_and_peer_count(factor: float) -> None:
    rng = random.Random(7)
    hosts = [_host(f"gpu{i:02d}", rng) for i in range(9)] + [_host("slow", rng, factor)]
    found = _baseline(_fleet(hosts))
    assert found and {f.host for f in found} == {"slow"}
    assert {f.id for f in found} == {baseline.BANDWIDTH_LOW}
    h2d = next(f for f in found if f.subject.startswith("host->GPU copy"))
    assert "(median of 8 GPUs)" in h2d.subject  # the host as a whole, not eight GPU findings
    assert "of 9 8xH100-SXM-NV18-8NIC-PIX hosts" in h2d.message and "the median 55." in h2d.message
    assert h2d.expected == pytest.approx(55.3, abs=0.6) and h2d.actual < h2d.expected * 0.95
    assert h2d.evidence[0].startswith("class 8xH100-SXM-NV18-8NIC-PIX in this run: median 55.") \
        and h2d.evidence[0].endswith("10 measured")
    nccl = [f for f in found if f.subject.startswith("NCCL bus bandwidth all_reduce")]
    assert nccl, "NCCL bus bandwidth per op and size"
    assert not [f for f in found if re.match(r"GPU\d", f.subject)]  # named once, as a host, not per GPU


def test_one_gpu_planted_low_is_found_on_a_host_that_is_otherwise_fine() -> None:
    rng = random.Random(11)
    hosts = [_host(f"gpu{i:02d}", rng) for i in range(9)] + [_host("gray", rng, 0.88, gpu=3)]
    found = _baseline(_fleet(hosts))
    assert {f.host for f in found} == {"gray"}
    subjects = sorted(f.subject for f in found)
    assert all(s.startswith(f"GPU3 ({GPU3}) ") for s in subjects), subjects
    assert {s.split(") ", 1)[1] for s in subjects} >= {"host->GPU copy", "GPU->host copy", "GPU pair copy NV18"}
    msg = next(f.message for f in found if f.subject.endswith("host->GPU copy"))
    assert "GPUs of class 8xH100-SXM-NV18-8NIC-PIX" in msg and "79 GPUs" in msg  # its peers: the other GPUs


def test_a_uniform_fleet_of_the_same_size_raises_nothing() -> None:
    rng = random.Random(3)
    fleet = _fleet([_host(f"gpu{i:02d}", rng) for i in range(10)])
    assert _baseline(fleet) == []
    states = dict(next(iter(fleet.check_states([baseline.BANDWIDTH_LOW])))[1])
    assert states[baseline.BANDWIDTH_LOW].passed  # judged, and nothing beyond the threshold


def test_too_few_peers_judge_nothing_and_say_so() -> None:
    rng = random.Random(5)
    hosts = [_host(f"gpu{i:02d}", rng) for i in range(3)] + [_host("slow", rng, 0.85)]
    fleet = _fleet(hosts)
    assert [f for f in _baseline(fleet) if f.id == baseline.BANDWIDTH_LOW] == []
    why = fleet.not_judged[baseline.BANDWIDTH_LOW]["slow"]
    assert "too few peers" in why and "4 host(s) of class 8xH100-SXM-NV18-8NIC-PIX" in why
    slow = next(h for h, states in fleet.check_states([baseline.BANDWIDTH_LOW]) if h.name == "slow")
    assert not slow.not_judged.get(baseline.BANDWIDTH_LOW)  # its own facts were fine: the fleet says why


def test_a_playbook_threshold_replaces_the_table_row() -> None:
    rng = random.Random(7)
    hosts = [_host(f"gpu{i:02d}", rng) for i in range(9)] + [_host("slow", rng, 0.88)]
    loose = baseline.thresholds_with({k: {"pct": 20.0} for k in baseline.THRESHOLDS})
    assert _baseline(_fleet(hosts, References(thresholds_for=lambda host: loose))) == []


def test_three_hosts_judged_against_a_known_good_fleet_of_their_class() -> None:
    rng = random.Random(13)
    good = _fleet([_host(f"good{i:02d}", rng) for i in range(12)])
    doc, left_out = baseline.class_baseline(
        ((h.name, h.fingerprint, h.topology_class, h.health.state.value, h.facts) for h in good.hosts), "t", "now")
    assert left_out == {} and len(doc["classes"]) == 1
    reference = baseline.parse_reference(json.loads(json.dumps(doc)), "base.json")
    rented = [_host("rent1", rng), _host("rent2", rng), _host("rent3", rng, 0.9)]
    alone = _fleet(rented)  # three hosts: nobody to compare with
    assert [f for f in _baseline(alone) if f.id == baseline.BANDWIDTH_LOW] == []
    judged = _fleet(rented, References(baseline=reference))
    found = [f for f in _baseline(judged) if f.id == baseline.BANDWIDTH_LOW]
    assert found and {f.host for f in found} == {"rent3"}
    assert any("12 8xH100-SXM-NV18-8NIC-PIX hosts of the baseline" in f.message for f in found)
    assert all(e.startswith("baseline base.json (from run t)") for f in found for e in f.evidence[:1])


def baseline_file(tmp_path: Path, hosts: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """`probe baseline` of a premigration run of `hosts` of the demo: the file, and what it said."""
    _rc, fleet, err = run_cli(["-l", hosts, "-p", "premigration"], tmp_path / "good")
    assert fleet is not None, err
    base = tmp_path / "base.json"
    env = dict(os.environ, PYTHONPATH=str(REPO), XDG_STATE_HOME=str(tmp_path / "state"))
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "baseline", str(tmp_path / "good"), "-o", str(base)],
                          capture_output=True, text=True, env=env, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return base, proc


def test_probe_baseline_exports_a_class_and_baseline_file_judges_three_hosts_against_it(tmp_path: Path) -> None:
    """The CLI: a known-good premigration run of the demo's DGX H100 class exported with
    `probe baseline`, then three hosts of that class alone (too few to compare among themselves)
    judged against it with --baseline-file: the GPU planted 10 % slow (dgx-h100-25) is found."""
    known = ",".join(f"dgx-h100-{i:02d}" for i in (1, 2, 3, 12, 13, 15, 19, 20))
    base, proc = baseline_file(tmp_path, known)
    doc = json.loads(base.read_text())
    (cls,) = [c for c in doc["classes"].values() if c["name"] == "8xH100-SXM-NV18-8NIC-PIX"]
    # dgx-h100-13 (NCCL over SHM: a fail) is no baseline; the warn hosts are
    assert cls["hosts"] == 7 and cls["gpu"]["h2d_gbps"]["n"] == 56
    assert "dgx-h100-13 left out: its health is failed" in proc.stderr
    # dgx-h100-15's NCCL environment override (a warn) keeps its NCCL figures out, its copies in; counted
    assert "dgx-h100-15 partly left out: the run flagged its figures nccl_busbw_gbps (nccl.env.override)" in proc.stderr
    assert "1 host(s) left out" in proc.stderr and "1 more with some figures left out" in proc.stderr
    # every known-good host measured NCCL since the demo recorded it everywhere (issue 49; ec1b3e5
    # exported n 2, 9dd361b n 1): dgx-h100-15's figures are left out, dgx-h100-13 is failed: 6 hosts
    assert [s["n"] for k, s in cls["host"].items() if k.startswith("nccl_busbw_gbps")] == [6] * 5, cls["host"]
    three = "dgx-h100-25,dgx-h100-07,rent-h100-03"
    _rc, alone, err = run_cli(["-l", three, "-p", "premigration"], tmp_path / "alone")
    assert alone is not None, err
    assert not [f for f in alone["findings"] if f["id"] == baseline.BANDWIDTH_LOW]
    _rc, judged, err = run_cli(["-l", three, "-p", "premigration", "--baseline-file", str(base)], tmp_path / "judged")
    assert judged is not None, err
    found = {f["subject"]: f for f in judged["findings"] if f["id"] == baseline.BANDWIDTH_LOW}
    assert f"GPU3 ({GPU3}) host->GPU copy" in found
    msg = found[f"GPU3 ({GPU3}) host->GPU copy"]["message"]
    assert "GPUs of class 8xH100-SXM-NV18-8NIC-PIX in the baseline" in msg and "63 GPUs" not in msg
    assert found[f"GPU3 ({GPU3}) host->GPU copy"]["evidence"][0].startswith(f"baseline {base} (from run ")
    assert json.loads((tmp_path / "judged" / "run.json").read_text())["plan"]["baseline_file"] == str(base)


def test_a_playbook_overrides_thresholds_per_figure_and_typos_are_errors(tmp_path: Path) -> None:
    from orchestrator.api.plan import PlanInputs, build_plan
    from orchestrator.api.playbook import PlaybookError, parse_playbook

    text = ("- name: rented\n  hosts: dgx_h100\n  probes: [host, p2p]\n"
            "  baselines:\n    h2d_gbps: {pct: 8, min_hosts: 3}\n    temperature_c: {delta: 10}\n")
    (play,) = parse_playbook(text, probes={"host": True, "p2p": False}, finding_ids=()).plays
    assert play.baselines == {"h2d_gbps": {"pct": 8.0, "min_hosts": 3}, "temperature_c": {"delta": 10.0}}
    book = tmp_path / "rented.yml"
    book.write_text(text)
    plan = build_plan(PlanInputs(playbook=str(book), limit="dgx-h100-01,rtx4090-01"))
    assert plan.refs.thresholds_for is not None
    h100 = plan.refs.thresholds_for("dgx-h100-01")
    assert (h100["h2d_gbps"].pct, h100["h2d_gbps"].min_hosts, h100["h2d_gbps"].z) == (8.0, 3, 3.0)
    assert h100["d2h_gbps"] == baseline.THRESHOLDS["d2h_gbps"]  # the rest of the table stands
    with pytest.raises(PlaybookError, match=r"unknown key 'h2d_gpbs'; did you mean 'h2d_gbps'\?"):
        parse_playbook(text.replace("h2d_gbps:", "h2d_gpbs:"), probes={"host": True, "p2p": False}, finding_ids=())
    with pytest.raises(PlaybookError, match="min_hosts must be at least 1"):
        parse_playbook(text.replace("min_hosts: 3", "min_hosts: 0"), probes={"host": True, "p2p": False},
                       finding_ids=())


def test_measures_held_packed_read_as_measure_tuples() -> None:
    import io
    import pickle

    from orchestrator.verdict import handoff

    figures = [baseline.Measure("temperature_c", "idle", "0000:18:00.0", 41.0),
               baseline.Measure("nccl_busbw_gbps", "all_reduce 1 GiB", None, 480.5),
               baseline.Measure("temperature_c", "idle", "0000:2a:00.0", float("inf"))]
    ms = baseline.Measures(figures)
    assert list(ms) == figures and ms == figures and len(ms) == 3 and ms[1] == figures[1] and ms[-1] == figures[-1]
    assert ms[1:] == figures[1:] and bool(baseline.Measures()) is False
    assert pickle.loads(pickle.dumps(ms)) == ms
    buf = io.BytesIO()
    handoff.dump(ms, buf)
    handoff.dump(baseline.Measures(figures), buf)
    buf.seek(0)
    a, b = handoff.Reader().load_all(buf)
    assert a == b == ms
    assert a._keys is b._keys  # what was measured: once for every host that measured the same


def test_a_hosts_gpu_findings_come_in_the_order_of_its_figures() -> None:
    """Each GPU's figures in turn (temperature, then copy): GPU0's slow copy comes before GPU1's
    heat, although the host's first figure is a temperature and temperatures are judged apart."""
    buses = [f"0000:{0x18 + i:02x}:00.0" for i in range(8)]

    def host(name: str, slow: int | None = None, hot: int | None = None) -> baseline.Judged:
        rng = random.Random(name)
        figures = []
        for i, bus in enumerate(buses):
            copy_gbps = 55.0 * (0.7 if i == slow else 1.0) * (1 + rng.uniform(-0.01, 0.01))
            figures.append(baseline.Measure("temperature_c", "idle", bus, 60.0 if i == hot else 40.0 + i % 2))
            figures.append(baseline.Measure("h2d_gbps", "", bus, round(copy_gbps, 2)))
        return baseline.Judged(name, "fp", "8xH100", baseline.Measures(figures))

    hosts = [host(f"ok{i}") for i in range(9)] + [host("gray", slow=0, hot=1)]
    found, _ = baseline.judge(hosts)
    assert [(f.host, f.subject.split(" ", 2)[:2]) for f in found] == [
        ("gray", ["GPU0", f"({buses[0]})"]), ("gray", ["GPU1", f"({buses[1]})"])]
    assert [f.id for f in found] == [baseline.BANDWIDTH_LOW, baseline.TEMPERATURE_HIGH]


# Findings that make a host's figure no known-good figure (issue 45): the figure's own finding, a
# cause the baselines name, any finding of the probe that measured it.  Each leaves out exactly the
# figures it names, and a finding of another probe leaves the copy figures in.
FLAGGING = [("baseline.bandwidth.low", {"p2p_pair_gbps", "h2d_gbps", "d2h_gbps", "local_copy_gbps"}),
            ("p2p.bandwidth.low", {"p2p_pair_gbps", "h2d_gbps", "d2h_gbps", "local_copy_gbps"}),
            ("p2p.anything.new", {"p2p_pair_gbps", "h2d_gbps", "d2h_gbps", "local_copy_gbps"}),
            ("pcie.link.downgraded", {"p2p_pair_gbps", "h2d_gbps", "d2h_gbps", "local_copy_gbps"}),
            ("gpu.clocks.slowdown", {"p2p_pair_gbps", "h2d_gbps", "d2h_gbps", "local_copy_gbps", "sm_clock_mhz",
                                     "power_w", "temperature_c"}),
            ("baseline.temperature.high", {"temperature_c", "sm_clock_mhz", "power_w"}),  # a hot GPU: slow, unlike
            ("gpu.ecc.uncorrectable", {"ecc_corrected_per_day", "pcie_replays_per_day"})]


@pytest.mark.parametrize("finding,figures", FLAGGING)
def test_probe_baseline_leaves_out_the_figures_the_run_flagged(finding: str, figures: set[str]) -> None:
    rng = random.Random(13)
    good = _fleet([_host(f"good{i:02d}", rng) for i in range(6)])
    rows = [(h.name, h.fingerprint, h.topology_class, h.health.state.value, h.facts) for h in good.hosts]
    doc, left_out = baseline.class_baseline(rows, "t", "now", {"good00": {finding}, "good01": {"nccl.env.override"}})
    assert set(left_out) == {"good00", "good01"} and not left_out["good00"].whole
    assert "nccl_busbw_gbps (nccl.env.override)" in str(left_out["good01"]) and "h2d" not in str(left_out["good01"])
    assert all(f in str(left_out["good00"]) for f in figures if f in baseline.flagged_figures([finding]))
    (cls,) = doc["classes"].values()
    for key, stats in cls["gpu"].items():  # 6 hosts of 8 GPUs; good00's flagged figures left out
        assert stats["n"] == (40 if key.split("[")[0] in figures else 48), (key, stats)


@pytest.mark.parametrize(("metric", "value", "median", "said"), [
    # a rate against a median of 0: the step is the figure; said once (issue 49: "400.0 /day, 400.0 /day above")
    ("ecc_corrected_per_day", 400.0, 0.0, "400 /day above the median 0 /day"),
    ("pcie_replays_per_day", 12.5, 0.0, "12.5 /day above the median 0 /day"),
    # a temperature: "°C" as every other surface writes it, never "44.0 C"
    ("temperature_c", 44.0, 33.0, "44 °C, 11 °C above the median 33 °C"),
    ("temperature_c", 89.25, 33.1, "89.2 °C, 56.1 °C above the median 33.1 °C"),
    # a share: the figure and the share, each once
    ("p2p_pair_gbps", 300.0, 360.0, "300 GB/s, 17 % below the median 360 GB/s"),
])
def test_a_baseline_message_says_each_figure_once_in_one_unit_style(metric: str, value: float, median: float,
                                                                     said: str) -> None:
    from orchestrator.verdict.findings import Located

    m = baseline.BY_KEY[metric]
    f = baseline._finding("h", m, Located("GPU0"), value, baseline.Stats(median, 0.0, 8), "8 GPUs", "class",
                          baseline.THRESHOLDS[metric], "")
    assert f.message.startswith(said), f.message
    assert not re.search(r"\d C\b|\.0 ", f.message), f.message  # no bare "C", no "44.0 "
    figures = re.findall(r"\d+(?:\.\d+)? (?:/day|°C|GB/s|%)", f.message.split(" the median")[0])
    assert len(figures) == len(set(figures)), f.message  # nothing said twice before the median
