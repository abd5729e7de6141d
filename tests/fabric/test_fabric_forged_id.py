"""A forged rank-0 NCCL id over the real sshd (issue 45): no collective runs anywhere, so no
`fabric.nccl.*` case passes, the members read `incomplete`, and the run exits 4, never 0.

node01 is rank 0 of the rail ring; its fake libnccl hands out an id naming a port nobody listens on
(orchestrator/simulate/fabric.py `forge_id`), which is well formed, so only its effect tells."""

from __future__ import annotations

from pathlib import Path

import pytest
from junitparser import JUnitXml, Skipped

from orchestrator.simulate.fabric import FabricScenario
from tests.support.fabric import FAST, FAST_NCCL, fabric_setup, names
from tests.support.sshd import SshdServer

pytestmark = [pytest.mark.slow, pytest.mark.ssh]


@pytest.fixture(scope="module")
def libs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fabric-libs")


def test_a_forged_nccl_id_is_not_judged_and_exits_4(sshd: SshdServer, libs: Path, tmp_path: Path) -> None:
    import json

    hosts = names(4)
    scenario = FabricScenario(seed=1, forge_id={hosts[0]})
    spec = dict(FAST, rounds=3, extra_rounds=0, tests=["ib_write_bw"],
                nccl=dict(FAST_NCCL, all_gpus=False, bisect=False, timeout_s=20))
    setup = fabric_setup(tmp_path, sshd, libs, 4, 1, scenario, spec, nccl=True)
    junit = tmp_path / "fabric.xml"
    proc = setup.cli.run("run", "-i", str(setup.inventory), "-p", str(setup.playbook), "--format", "json",
                         "--junit", str(junit), timeout=300)
    doc = json.loads(proc.stdout)
    assert proc.returncode == 4, proc.stderr[-2000:]
    assert [f["id"] for f in doc["findings"] if f["severity"] == "fail"] == []
    by_name = {h["name"]: h for h in doc["hosts"]}
    for h in hosts:
        assert by_name[h]["probes"]["fabric"]["outcome"] != "ok", by_name[h]["probes"]["fabric"]
        assert by_name[h]["health"]["state"] == "incomplete", by_name[h]["health"]
        assert "None" not in by_name[h]["probes"]["fabric"]["reason"]
    cases = {(suite.name, case.name): case for suite in JUnitXml.fromfile(str(junit)) for case in suite}
    nccl = {k: c for k, c in cases.items() if k[1].startswith("fabric.nccl.")}
    assert {h for h, _ in nccl} == set(hosts)
    assert all(any(isinstance(r, Skipped) for r in c.result) for c in nccl.values()), \
        [k for k, c in nccl.items() if not c.result]
