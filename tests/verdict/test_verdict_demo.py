"""The bundled demo fleet through the real CLI, and the helpers the other verdict tests share.

Helpers (imported by test_verdict_golden, test_schema, test_fingerprint, test_verdict_catalog):
`run_cli(args, out_dir)` runs `python -m orchestrator run ... -o out_dir` in a subprocess and returns
(exit code, fleet.json); `demo_fleet()` is that for the demo fleet, once per session;
`recorded_facts(host)` normalizes one demo host's recorded envelopes.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from orchestrator.facts.normalize import normalize_host
from orchestrator.store.compact import read_plain

ROOT = Path(__file__).resolve().parents[2]
RECORDINGS = ROOT / "orchestrator" / "demo" / "recordings"
HEALTHY = ["dgx-h100-01", "dgx-h100-02", "dgx-h100-03", "dgx-a100-01", "dgx-a100-02", "dgx1-v100-01",
           "rtx4090-01", "ws-a6000-01", "lenovo-h100-01", "dgx-h100-12", "rent-h100-03"]


def run_cli(args: list[str], out_dir: Path, timeout: float = 120) -> tuple[int, dict[str, Any] | None, str]:
    """One `probe run` in a subprocess writing its run directory to out_dir: (rc, fleet.json, stderr)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "orchestrator", "run", "-q", "-o", str(out_dir), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    fleet_path = out_dir / "fleet.json"
    fleet = read_plain(fleet_path) if fleet_path.is_file() else None
    return proc.returncode, fleet, proc.stderr


@functools.lru_cache(maxsize=1)
def demo_fleet() -> tuple[int, dict[str, Any]]:
    """The demo fleet's fleet.json, built once per test session."""
    out = Path(tempfile.mkdtemp(prefix="verdict-demo-")) / "run"
    rc, fleet, err = run_cli(["-l", "demo"], out)
    assert fleet is not None, f"demo run wrote no fleet.json (rc {rc}): {err}"
    return rc, fleet


def recorded_facts(host: str) -> dict[str, Any]:
    """Normalized facts of one demo host, straight from its recorded envelopes."""
    data = {}
    for path in sorted((RECORDINGS / host).glob("*.json")):
        env = json.loads(path.read_text())
        if env.get("status") == "ok":
            data[env["probe"]] = env["data"]
    facts, errors = normalize_host(data)
    assert not errors, errors
    return facts


def test_demo_run_exit_code_says_fail_findings() -> None:
    rc, fleet = demo_fleet()
    assert fleet["summary"]["findings"]["fail"] > 0
    assert rc == 1  # exitcodes: 1 = a finding of severity fail, every host answered
    # 25 hosts, 4 NCCL hosts (issue 19), 8 of issue 18 whose faults are in the kernel log, the NICs, NVML health,
    # software, and one more of issue 18 with a fatal AER count in sysfs; issue 30: a GB200 tray and a B300 board; issue 32: a gray GPU, a hot GPU,
    # a wedged driver (its probes still answer: ok) and three rented hosts judged against the security floor
    assert fleet["summary"]["outcomes"]["ok"] == fleet["summary"]["hosts"] == 46


def test_healthy_demo_hosts_have_no_fail_or_warn_finding() -> None:
    _, fleet = demo_fleet()
    bad = [(f["host"], f["id"], f["severity"]) for f in fleet["findings"]
           if f["host"] in HEALTHY and f["severity"] in ("fail", "warn")]
    assert bad == []


def test_demo_shows_classes_an_outlier_and_every_kind() -> None:
    _, fleet = demo_fleet()
    assert any(c["outliers"] for c in fleet["classes"])
    assert {f["kind"] for f in fleet["findings"]} == {"fault", "platform_limitation", "unknown"}
    big = fleet["classes"][0]
    # 8 DGX H100s of the original demo, the 4 NCCL hosts, the 9 of issue 18 and issue 32's gray and hot GPU
    # hosts: their faults are not topology (the rented HGX boards are a class of their own)
    assert big["name"] == "8xH100-SXM-NV18-8NIC-PIX" and len(big["members"]) == 23


# Issue 32's kinds and the demo host that shows each (simulate/demo_fleet.yml).  The bandwidth,
# clock and power figures come from the p2p probe, which the premigration playbook runs (the
# passive audit shows the idle temperature, the error rate, the wedged driver and the security
# floor); host.repeat_offender needs a run history: tests/verdict/test_repeat_offenders.py stores
# five runs of demo hosts.
NEW_KINDS = {
    "baseline.bandwidth.low": "dgx-h100-25",  # GPU3 10 % slower than its class, above every floor
    "baseline.errors.high": "dgx-h100-25",  # GPU6: 400 corrected ECC errors a day, its class none
    "baseline.temperature.high": "dgx-h100-26",  # GPU5 11 C above its siblings
    "baseline.clocks.low": "dgx-h100-26",  # ... and slower and lower in power under load
    "baseline.power.outlier": "dgx-h100-26",
    "gpu.driver.unresponsive": "dgx-h100-27",  # NVML hangs in nvmlDeviceGetHandleByIndex on GPU3
    "gpu.driver.process_stuck": "dgx-h100-27",  # a process in D state on /dev/nvidia3
    "software.security.driver": "rent-h100-01",  # 535.104.05 (rented group: security_floor: true)
    "software.security.firmware": "rent-h100-01",  # ConnectX-7 28.39.1002
    "software.security.branch": "rent-h100-02",  # 550.163.01: R550's last fix, R550 no longer listed
}


def test_the_demo_shows_one_finding_of_each_new_kind(tmp_path: Path) -> None:
    _rc, fleet, err = run_cli(["-l", "demo", "-p", "premigration"], tmp_path / "run")
    assert fleet is not None, err
    raised = {(f["id"], f["host"]) for f in fleet["findings"]}
    assert sorted(set(NEW_KINDS.items()) - raised) == []
    hosts = {h["name"]: h for h in fleet["hosts"]}
    # the patched rental passes the floor it was judged against
    assert not [f for f in fleet["findings"] if f["host"] == "rent-h100-03" and f["id"].startswith("software.security")]
    assert "software.security.driver" not in hosts["rent-h100-03"]["not_judged"]
    _, audit = demo_fleet()  # the passive audit: what it can see of them
    seen = {(f["id"], f["host"]) for f in audit["findings"]}
    assert {k: v for k, v in NEW_KINDS.items() if (k, v) in seen} == {
        k: v for k, v in NEW_KINDS.items() if k not in ("baseline.bandwidth.low", "baseline.clocks.low",
                                                        "baseline.power.outlier")}
