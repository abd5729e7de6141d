"""Scheduler reconciliation (issue 50 item 4): what Slurm or Kubernetes advertises against what the
run measured and judged.

Slurm is a real slurmctld with four slurmd whose nodes carry a configured Gres (tests/support/
slurm.py), read by `probe run --slurm` through `scontrol show node -o`; the demo hosts are mapped to
its nodes by `probe_slurm_node`.  Kubernetes is the demo's simulated `kubectl get nodes -o json`
(orchestrator/demo/k8s-nodes.json, itself validated as Nodes by Kubernetes' schemas), where
dgx-h100-05 advertises 8 GPUs and has 7.  Hosts where the two agree get no finding.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from orchestrator.inventory.scheduler import parse_k8s_nodes, parse_scontrol, slurm_gres, slurm_schedulable
from orchestrator.verdict import rules
from orchestrator.verdict.checks.scheduler import model_agrees
from tests.support.fleet import Cli, finding_ids, replay_inventory
from tests.support.slurm import SlurmCluster, missing_reason, start_cluster

ROOT = Path(__file__).resolve().parents[2]
DEMO_VIEW = ROOT / "orchestrator" / "demo" / "k8s-nodes.json"
S = rules.scheduler
SCHEDULER_IDS = {r.id for r in (S.ADVERTISED_MISSING, S.NOT_ADVERTISED, S.MODEL_MISMATCH, S.SCHEDULABLE_WHILE_FAILED)}


def _scheduler_findings(fleet: dict[str, Any]) -> dict[str, set[str]]:
    return {h: ids & (SCHEDULER_IDS | {S.NODE_UNKNOWN.id}) for h, ids in finding_ids(fleet).items()}


# ------------------------------------------------------------------ Slurm, real slurmctld

# demo host -> (its Slurm node, the node's Gres): agree / one advertised that is missing / wrong
# type / fewer advertised than healthy
SLURM_MAP = {"dgx-h100-01": ("node1", "gpu:h100:8"), "dgx-h100-05": ("node2", "gpu:h100:8"),
             "dgx-h100-02": ("node3", "gpu:a100:8"), "dgx-h100-03": ("node4", "gpu:h100:6")}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    reason = missing_reason()
    if reason:
        pytest.skip(reason)
    c = start_cluster(tmp_path_factory.mktemp("slurm-gres"), 4, gres=dict(SLURM_MAP.values()))
    try:
        yield c
    finally:
        c.stop()


def _slurm_inventory(tmp: Path) -> Path:
    text = replay_inventory(list(SLURM_MAP))
    for host, (node, _) in SLURM_MAP.items():
        text = text.replace(f"    {host}:\n", f"    {host}:\n      probe_slurm_node: {node}\n")
    inv = tmp / "fleet.yml"
    inv.write_text(text)
    return inv


@pytest.mark.slow
def test_a_real_slurm_gres_is_reconciled_with_the_run(cluster: SlurmCluster, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", str(cluster.conf))
    cli = Cli.create(tmp_path)
    inv = _slurm_inventory(tmp_path)
    proc, fleet = cli.run_json("run", "-i", str(inv), "--slurm")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    got = _scheduler_findings(fleet)
    assert got["dgx-h100-01"] == set()  # Gres=gpu:h100:8, 8 healthy H100s, idle and healthy: nothing
    assert got["dgx-h100-05"] == {S.ADVERTISED_MISSING.id, S.SCHEDULABLE_WHILE_FAILED.id}  # 8 advertised, 7 there
    assert got["dgx-h100-02"] == {S.MODEL_MISMATCH.id}  # gpu:a100 on an H100 host
    assert got["dgx-h100-03"] == {S.NOT_ADVERTISED.id}  # 6 advertised, 8 healthy
    # drained by the operator: still advertised-but-missing, no longer schedulable while failed
    drained = cluster.run(["scontrol", "update", "NodeName=node2", "State=DRAIN", "Reason=fleetprobe test"])
    assert drained.returncode == 0, drained.stderr
    proc, fleet = cli.run_json("run", "-i", str(inv), "--slurm")
    assert _scheduler_findings(fleet)["dgx-h100-05"] == {S.ADVERTISED_MISSING.id}


@pytest.mark.slow
def test_the_real_scontrol_output_is_read_whole(cluster: SlurmCluster) -> None:
    out = cluster.run(["scontrol", "show", "node", "-o"])
    view = parse_scontrol(out.stdout)
    assert view.problems == ()
    assert {n: (a.gpus, a.models) for n, a in view.nodes.items()} == {
        node: (int(g.split(":")[2]), (g.split(":")[1],)) for node, g in SLURM_MAP.values()}


def test_without_slurm_the_run_says_why_and_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "no-such-slurm.conf"))
    monkeypatch.setenv("PATH", str(tmp_path))  # no scontrol at all
    cli = Cli.create(tmp_path)
    proc = subprocess.run([*cli.argv("run", "-l", "dgx-h100-01", "--slurm")], env={**cli.env(), "PATH": str(tmp_path)},
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and "--slurm" in proc.stderr and "scontrol" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr and "None" not in proc.stderr


# ------------------------------------------------------------------ Kubernetes, the demo's view

def test_the_demo_view_is_nodes_kubernetes_accepts() -> None:
    doc = json.loads(DEMO_VIEW.read_text())
    for item in doc["items"]:
        kubernetes_validate.validate(item, "1.37.0", strict=True)


def test_the_demo_shows_8_advertised_7_present_and_nothing_where_they_agree(tmp_path: Path) -> None:
    cli = Cli.create(tmp_path)
    proc, fleet = cli.run_json("run", "-l", "dgx-h100-01,dgx-h100-02,dgx-h100-05,dgx-h100-06",
                               "--k8s-nodes", str(DEMO_VIEW))
    assert proc.returncode == 1, proc.stderr
    got = _scheduler_findings(fleet)
    assert got == {"dgx-h100-01": set(), "dgx-h100-02": set(),
                   "dgx-h100-05": {S.ADVERTISED_MISSING.id, S.SCHEDULABLE_WHILE_FAILED.id},
                   "dgx-h100-06": {S.NODE_UNKNOWN.id}}  # not in the view: said, at info, never a silent pass
    missing = next(f for f in fleet["findings"] if f["id"] == S.ADVERTISED_MISSING.id)
    assert missing["expected"] == 8 and missing["actual"] == 7 and missing["severity"] == "fail"


def test_the_view_on_standard_input(tmp_path: Path) -> None:
    cli = Cli.create(tmp_path)
    proc = subprocess.run([*cli.argv("run", "-l", "dgx-h100-05", "--k8s-nodes", "-", "--format", "json")],
                          env=cli.env(), input=DEMO_VIEW.read_text(), capture_output=True, text=True, timeout=120)
    assert S.ADVERTISED_MISSING.id in finding_ids(json.loads(proc.stdout))["dgx-h100-05"], proc.stderr


@pytest.mark.parametrize("content", ["", "not json", "[]", '{"items": 3}', '{"kind": "List"}', "\ufeff{}", "{" * 5000])
def test_a_view_that_is_not_kubectl_output_is_a_usage_error(tmp_path: Path, content: str) -> None:
    bad = tmp_path / "nodes.json"
    bad.write_text(content)
    proc = Cli.create(tmp_path).run("run", "-l", "dgx-h100-01", "--k8s-nodes", str(bad))
    assert proc.returncode == 2 and "--k8s-nodes" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


# ------------------------------------------------------------------ the readers, hostile input

def _node(name: Any = "n1", gpus: Any = "8", **over: Any) -> dict[str, Any]:
    n: dict[str, Any] = {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
                         "spec": {}, "status": {"allocatable": {"nvidia.com/gpu": gpus},
                                                "conditions": [{"type": "Ready", "status": "True"}]}}
    n.update(over)
    return n


@pytest.mark.parametrize("item", [3, None, "node", [], _node(name=None), _node(name=""), _node(name=7),
                                  _node(gpus="8.5"), _node(gpus="-1"), _node(gpus="1e3"), _node(gpus=8),
                                  _node(gpus="８"), _node(gpus="9" * 40)])
def test_a_node_kubernetes_could_not_have_written_costs_that_node_only(item: Any) -> None:
    view = parse_k8s_nodes({"items": [item, _node("good")]})
    assert list(view.nodes) == ["good"] and len(view.problems) == 1
    assert "None" not in view.problems[0] and "\n" not in view.problems[0]


@pytest.mark.parametrize(("over", "schedulable"), [
    ({}, True), ({"spec": {"unschedulable": True}}, False),
    ({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}, False),
    ({"status": {"conditions": "Ready"}}, False), ({"status": {}}, False)])
def test_kubernetes_schedulable_is_ready_and_not_cordoned(over: dict[str, Any], schedulable: bool) -> None:
    assert parse_k8s_nodes({"items": [_node(**over)]}).nodes["n1"].schedulable is schedulable


def test_mig_resources_and_missing_gpu_resource() -> None:
    mig = _node()
    mig["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] = "14"
    none = _node()
    del none["status"]["allocatable"]["nvidia.com/gpu"]
    view = parse_k8s_nodes({"items": [mig, {**none, "metadata": {"name": "n2"}}]})
    assert view.nodes["n1"].mig and view.nodes["n2"].gpus == 0  # dropped by the device plugin: 0 advertised


@pytest.mark.parametrize(("gres", "want"), [
    ("gpu:h100:8(S:0-1)", (8, ("h100",))), ("gpu:8", (8, ())), ("(null)", (0, ())),
    ("gpu:a100:4(S:0),gpu:h100:4(S:1)", (8, ("a100", "h100"))), ("mps:200,gpu:t4:2", (2, ("t4",))),
    ("gpu:h100:x", None), ("gpu:h100:8:9", None), ("gpu", None), ("gpu:", None)])
def test_slurm_gres(gres: str, want: Any) -> None:
    assert slurm_gres(gres) == want


@pytest.mark.parametrize(("state", "ok"), [
    ("IDLE", True), ("MIXED", True), ("ALLOCATED", True), ("IDLE+DRAIN", False), ("MIXED+DRAIN", False),
    ("DOWN*", False), ("IDLE*", False), ("DRAINED", False), ("IDLE+MAINTENANCE", False), ("IDLE+POWERED_DOWN", False),
    ("FAIL", False), ("INVAL", False)])
def test_slurm_schedulable_states(state: str, ok: bool) -> None:
    assert slurm_schedulable(state) is ok


@pytest.mark.parametrize("line", ["garbage", "NodeName=", "State=IDLE Gres=gpu:8", "NodeName=n1 Gres=gpu:8",
                                  "NodeName=n1 State=IDLE Gres=gpu:h100:many", "NodeName=n1\x00 State=IDLE Gres=gpu:x:"])
def test_a_scontrol_line_that_is_not_a_node_costs_that_line_only(line: str) -> None:
    view = parse_scontrol(f"{line}\nNodeName=good State=IDLE Gres=gpu:h100:8 Reason=a reason with spaces\n")
    assert list(view.nodes) == ["good"] and len(view.problems) == 1 and "\x00" not in view.problems[0]


@pytest.mark.parametrize(("advertised", "name", "agrees"), [
    ("h100", "NVIDIA H100 80GB HBM3", True), ("NVIDIA-H100-80GB-HBM3", "NVIDIA H100 80GB HBM3", True),
    ("NVIDIA-H100-80GB-HBM3-SHARED", "NVIDIA H100 80GB HBM3", True), ("a100", "NVIDIA H100 80GB HBM3", False),
    ("NVIDIA-A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", False), ("", "NVIDIA H100 80GB HBM3", False)])
def test_model_agreement(advertised: str, name: str, agrees: bool) -> None:
    assert model_agrees(advertised, name) is agrees


def test_an_inventory_asking_for_the_scheduler_without_its_view_is_not_judged_never_passed(tmp_path: Path) -> None:
    inv = tmp_path / "fleet.yml"
    inv.write_text(replay_inventory(["dgx-h100-01"]).replace('"gpu_count"', '"scheduler": true, "gpu_count"', 1))
    proc, fleet = Cli.create(tmp_path).run_json("run", "-i", str(inv))
    assert proc.returncode in (0, 1), proc.stderr
    host = fleet["hosts"][0]
    assert "scheduler" not in host["expect"]
    assert set(host["not_judged"]) >= SCHEDULER_IDS, host["not_judged"]


def test_a_healthy_host_the_scheduler_overcounts_is_a_config_fault_not_a_node_to_drain(tmp_path: Path) -> None:
    # dgx-h100-01 is healthy with 8 GPUs; a view advertising 9 (or 16) is the scheduler's error: its count is
    # a finding, but the node's own verdict gives no reason to take it out of service
    for advertised in ("9", "16"):
        doc = json.loads(DEMO_VIEW.read_text())
        [item] = [i for i in doc["items"] if i["metadata"]["name"] == "dgx-h100-01"]
        for key in ("capacity", "allocatable"):
            item["status"][key]["nvidia.com/gpu"] = advertised
        view = tmp_path / f"nodes-{advertised}.json"
        view.write_text(json.dumps(doc))
        proc, fleet = Cli.create(tmp_path / advertised).run_json("run", "-l", "dgx-h100-01", "--k8s-nodes", str(view))
        assert proc.returncode == 1, proc.stderr
        assert _scheduler_findings(fleet) == {"dgx-h100-01": {S.ADVERTISED_MISSING.id}}
