"""`--k8s-out DIR` read back by Kubernetes' own schemas (issue 50 item 2).

Every object the demo writes validates with kubernetes-validate against Kubernetes 1.37 (strict:
no field the API does not know); the status patch is a Node.  A failed GPU is tainted NoSchedule,
a degraded one None, none NoExecute; a second run carries each unchanged condition's
lastTransitionTime; a node name a host supplies that Kubernetes or the shell would misread is left
out of apply.sh, which a real `sh` runs against a recording `kubectl`.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from orchestrator.present.outputs import kubernetes as k8s
from orchestrator.verdict.result import FleetResult
from tests.cli.test_cli_terminal import probe
from tests.support.judged import judged
from tests.verdict.test_diff import finding, fleet, host

K8S = "1.37.0"


@functools.lru_cache(maxsize=1)
def demo_out() -> tuple[Path, Path, Path]:
    """Two demo runs into one results directory, each writing --k8s-out: (first DIR, DIR, results)."""
    work = Path(tempfile.mkdtemp(prefix="k8s-out-"))
    for _ in range(2):
        r = probe("run", "--results", str(work / "results"), "--k8s-out", str(work / "k8s"), "-q")
        assert r.returncode not in (0, 2, 70) and "Traceback" not in r.stderr, r.stderr
        if not (work / "first").exists():
            shutil.copytree(work / "k8s", work / "first")
    return work / "first", work / "k8s", work / "results"


def _docs(directory: Path) -> dict[str, Any]:
    return {p.name: json.loads(p.read_text()) for p in sorted(directory.glob("*.json"))}


def _validate(doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, K8S, strict=True)


def test_every_object_validates_against_kubernetes_137() -> None:
    docs = _docs(demo_out()[1])
    kinds = {"status": 0, "labels": 0, "rules": 0}
    for name, doc in docs.items():
        items = doc["items"] if doc["kind"] == "List" else [doc]
        for item in items:
            _validate(item)
        kinds["status" if name.endswith(".status.json") else "labels" if name.endswith(".labels.json")
              else "rules"] += len(items)
    assert kinds["status"] == kinds["labels"] >= 20 and kinds["rules"] >= 10


def test_the_validator_refuses_what_kubernetes_would() -> None:
    """The check can fail: a NoExecute-free rule with a field the API lacks, and a Node condition
    without its status, are refused by the same validator."""
    rule = json.loads((demo_out()[1] / "dgx-h100-04.devicetaintrules.json").read_text())["items"][0]
    bad_rule = {**rule, "spec": {**rule["spec"], "deviceSelector": {**rule["spec"]["deviceSelector"], "uuid": "x"}}}
    status = json.loads((demo_out()[1] / "dgx-h100-04.status.json").read_text())
    bad_status = {**status, "status": {"conditions": [{"type": "FleetprobeUnhealthy"}]}}
    for bad in (bad_rule, bad_status):
        with pytest.raises(kubernetes_validate.ValidationError):
            _validate(bad)


def _rules(directory: Path) -> list[dict[str, Any]]:
    return [i for p in sorted(directory.glob("*.devicetaintrules.json")) for i in json.loads(p.read_text())["items"]]


def test_failed_gpus_are_noschedule_degraded_none_never_noexecute() -> None:
    rules = _rules(demo_out()[1])
    effects = {(r["spec"]["taint"]["value"], r["spec"]["taint"]["effect"]) for r in rules}
    assert effects == {("failed", "NoSchedule"), ("degraded", "None")}
    h04 = [r for r in rules if r["spec"]["deviceSelector"]["pool"] == "dgx-h100-04"]
    assert [r["spec"]["deviceSelector"] for r in h04] == [
        {"driver": "gpu.nvidia.com", "pool": "dgx-h100-04", "device": "gpu-2"}]  # its GPU2's links are down
    assert h04[0]["metadata"]["annotations"]["fleetprobe.io/pci-bus-id"] == "0000:3a:00.0"
    assert h04[0]["metadata"]["annotations"]["fleetprobe.io/findings"] == "nvlink.link.down"


def test_conditions_and_labels_say_the_verdict_in_aks_and_gfd_terms() -> None:
    docs = _docs(demo_out()[1])
    conds = {c["type"]: c for c in docs["dgx-h100-04.status.json"]["status"]["conditions"]}
    assert conds["FleetprobeUnhealthy"]["status"] == "True" and conds["FleetprobeUnhealthy"]["reason"] == "Failed"
    assert conds["FleetprobeNVLinkInactive"]["status"] == "True"
    assert conds["FleetprobeGPUMissing"]["status"] == "False"
    assert set(conds) == {k8s.HEALTH_CONDITION, *(r.type for r in k8s.CONDITIONS)}
    assert all("\n" not in c["message"] and "None" not in c["message"] for c in conds.values())
    labels = docs["dgx-h100-04.labels.json"]["metadata"]["labels"]
    assert labels["fleetprobe.io/health"] == "failed"
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3" and labels["nvidia.com/gpu.count"] == "8"
    # MIG on: GFD writes other names, so fleetprobe writes no product/count label
    assert "nvidia.com/gpu.product" not in docs["vm-a100-01.labels.json"]["metadata"]["labels"]


def test_an_unchanged_condition_keeps_its_transition_time_a_new_heartbeat() -> None:
    first, second, _ = demo_out()
    before = {c["type"]: c for c in json.loads((first / "dgx-h100-04.status.json").read_text())["status"]["conditions"]}
    after = {c["type"]: c for c in json.loads((second / "dgx-h100-04.status.json").read_text())["status"]["conditions"]}
    assert before.keys() == after.keys()
    for t, c in after.items():
        assert c["status"] == before[t]["status"]
        assert c["lastTransitionTime"] == before[t]["lastTransitionTime"], t
        assert c["lastHeartbeatTime"] > before[t]["lastHeartbeatTime"]


def _one_host(name: str = "gpu01", started: str | None = None) -> FleetResult:
    doc = fleet("20261201T000000Z-abc123", [host(name)], [finding("gpu.count.mismatch", name, "host")])
    doc["run"]["started"] = started
    return judged(doc)


def test_a_changed_status_transitions_now_and_the_history_stands_in_for_a_missing_file() -> None:
    now = _one_host()
    h = now.hosts[0]
    flipped = {"FleetprobeGPUMissing": ("False", "2026-11-01T00:00:00Z"),
               "FleetprobeNVLinkInactive": ("False", "2026-11-01T00:00:00Z")}
    conds = {c["type"]: c for c in k8s.status_patch(now, h, "gpu01", "T-NOW", flipped)["status"]["conditions"]}
    assert conds["FleetprobeGPUMissing"]["status"] == "True"
    assert conds["FleetprobeGPUMissing"]["lastTransitionTime"] == "T-NOW"
    assert conds["FleetprobeNVLinkInactive"]["lastTransitionTime"] == "2026-11-01T00:00:00Z"  # unchanged: carried
    # no earlier file: the previous run (history) had the same statuses, so they held since it
    before = _one_host(started="2026-11-30T00:00:00Z")
    conds = {c["type"]: c for c in k8s.status_patch(now, h, "gpu01", "T-NOW", {}, previous=before)["status"]["conditions"]}
    assert {c["lastTransitionTime"] for c in conds.values()} == {"2026-11-30T00:00:00Z"}
    doc = fleet("r0", [host("gpu01")], [])  # the run before found nothing: GPUMissing flipped since
    doc["run"]["started"] = "2026-11-30T00:00:00Z"
    fixed = judged(doc)
    conds = {c["type"]: c for c in k8s.status_patch(now, h, "gpu01", "T-NOW", {}, previous=fixed)["status"]["conditions"]}
    assert conds["FleetprobeGPUMissing"]["lastTransitionTime"] == "T-NOW"
    assert conds["FleetprobeNVLinkInactive"]["lastTransitionTime"] == "2026-11-30T00:00:00Z"


@pytest.mark.parametrize("content", [b"", b"not json", b"[]", b'{"status": 3}', b'{"status": {"conditions": [1, null]}}',
                                     b'{"status": {"conditions": [{"type": "X", "status": "True"}]}}',
                                     b"\xff\xfe", b"{" * 10000])
def test_a_previous_patch_that_is_not_one_carries_nothing(tmp_path: Path, content: bytes) -> None:
    p = tmp_path / "n.status.json"
    p.write_bytes(content)
    assert k8s.previous_conditions(p) == {}


def test_a_previous_patch_that_is_a_fifo_or_directory_is_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    assert k8s.previous_conditions(tmp_path / "fifo") == {} and k8s.previous_conditions(tmp_path / "dir") == {}


HOSTILE_NODES = ["$(touch pwned)", "a b", "node;reboot", "../etc", "UPPER", "x" * 254, "-dash", "n\nkubectl delete",
                 "n'q", "ünï", ""]


def _recording_kubectl(tmp_path: Path) -> tuple[dict[str, str], Path]:
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "kubectl.log"
    (bindir / "kubectl").write_text(f'#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done >> {log}\nprintf "\\n" >> {log}\n')
    (bindir / "kubectl").chmod(0o755)
    return {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}, log


def test_hostile_node_names_are_left_out_and_the_real_shell_runs_only_our_lines(tmp_path: Path) -> None:
    hosts = [host(f"gpu{i:02d}") for i in range(len(HOSTILE_NODES))]
    for h, name in zip(hosts, HOSTILE_NODES):
        h["connection"] = {"probe_k8s_node": name}
    hosts.append({**host("ok-host"), "connection": {"probe_k8s_node": "node-7.example"}})
    out = tmp_path / "k8s"
    k8s.write_k8s(judged(fleet("20261201T000000Z-abc123", hosts, [])), out)
    script = (out / "apply.sh").read_text()
    assert script.count("# left out:") == len([n for n in HOSTILE_NODES if n])  # "" falls back to the host name
    assert sorted(p.name for p in out.glob("*.status.json")) == ["gpu10.status.json", "node-7.example.status.json"]
    env, log = _recording_kubectl(tmp_path)
    r = subprocess.run(["sh", str(out / "apply.sh")], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=30)
    assert r.returncode == 0, r.stderr
    calls = [c.split("\0")[:-1] for c in log.read_text().split("\n") if c]
    assert {c[2] for c in calls if c[0] == "patch"} == {"gpu10", "node-7.example"}
    assert not (tmp_path / "pwned").exists() and not Path("pwned").exists()


def test_node_name_comes_from_probe_k8s_node() -> None:
    f = judged(fleet("r1", [{**host("inv-name"), "connection": {"probe_k8s_node": "k8s-node-1"}}], []))
    assert k8s.node_name(f.hosts[0]) == "k8s-node-1"
    assert k8s.node_name(_one_host("plain").hosts[0]) == "plain"
