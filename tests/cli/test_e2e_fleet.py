"""The simulated GPU fleet end to end: every probe over the real sshd against fixture machines.

Each host is a real SSH login on the loopback sshd whose probes are pointed (probe_root,
probe_args) at a simulated machine: a sysfs/proc tree and compiled fake libnvidia-ml / libcuda,
built exactly as the bundled demo recordings were. The run must find on each host exactly the
faults its machine has, and agree finding for finding with replaying the demo recordings of the
same machines. The stored runs then feed every other command once: hosts, probes, runs, show,
diff, rejudge, report.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tests.support import fakes
from tests.support.fleet import (
    Cli,
    SimulatedHost,
    build_simulated_fleet,
    finding_ids,
    hosts_by_name,
    replay_inventory,
    ssh_hosts,
)
from tests.support.sshd import ROOT_DIR, SshdServer

pytestmark = pytest.mark.ssh

SCHEMA = json.loads((ROOT_DIR / "orchestrator" / "schema" / "fleet.schema.json").read_text())
PROBES = ["host", "pcie", "nvml", "nvlink", "p2p"]

# One play for every host, one for the two P2P machines (the P2P test is the costly probe).
PLAYBOOK = """\
- name: inventory and health
  hosts: all
  probes: [host, pcie, nvml, nvlink]
- name: p2p bandwidth
  hosts: "dgx-h100-07:dgx-a100-05"
  probes: [p2p]
"""

# Demo host (its simulated machine) -> exactly the finding ids it must raise, every severity.
# The inventory expects what the demo inventory expects of each group (probe_expect).
EXPECTED: dict[str, set[str]] = {
    "dgx-h100-01": set(),  # dgx-h100: healthy
    # 2 of 18 NVLinks down on one GPU; its NVLink graph differs from the H100 class
    "dgx-h100-04": {"nvlink.link.down", "topology.class.outlier"},
    # a GPU on the bus that the driver never bound: 8 on PCI, 7 in /dev and NVML, 7 != expected 8
    "dgx-h100-05": {"gpu.count.pci_vs_driver", "gpu.count.pci_vs_nvml", "gpu.count.mismatch",
                    "topology.class.outlier"},
    # NVLink P2P copies at a fraction of the expected speed, slower than the host path
    "dgx-h100-07": {"p2p.bandwidth.low", "p2p.slower_than_host"},
    "dgx-a100-03": {"pcie.acs.enabled"},  # ACS on a switch: P2P detours through the root complex
    "dgx-a100-05": {"p2p.not_possible"},  # peer access refused between GPUs
    # fan at 0 RPM at 58 C, and so 17 C hotter than its siblings (issue 32's baseline, its consequence);
    # GeForce P2P disabled by the driver (info, platform limitation)
    "rtx4090-02": {"sensor.fan.zero_while_hot", "baseline.temperature.high", "p2p.status.disabled"},
    "ws-a6000-02": {"pcie.nic.shared_switch"},  # the NIC moved under a GPU's switch
    # a VM: facts about the platform (info), not faults
    "vm-a100-01": {"host.virtualized", "gpu.virtualization", "gpu.mig.enabled", "p2p.status.disabled"},
}
HOSTS = list(EXPECTED)
HEALTHY = ["dgx-h100-01"]


@pytest.fixture(scope="module")
def sims(tmp_path_factory: pytest.TempPathFactory) -> list[SimulatedHost]:
    if not shutil.which("gcc") and not shutil.which("cc"):
        pytest.skip("the fake NVML/CUDA libraries need gcc")
    return build_simulated_fleet(HOSTS, tmp_path_factory.mktemp("simfleet"))


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> Cli:
    cli = Cli.create(tmp_path_factory.mktemp("e2e-fleet"))
    (cli.home / "fleet-check.yml").write_text(PLAYBOOK)
    return cli


@pytest.fixture(scope="module")
def ssh_run(sshd: SshdServer, sims: list[SimulatedHost], cli: Cli) -> tuple[Any, dict[str, Any], Path, Path]:
    inv = cli.home / "simfleet.yml"
    inv.write_text(sshd.inventory_yaml(ssh_hosts(sshd, sims)))
    run_dir = cli.results / "ssh-run"
    proc, fleet = cli.run_json("run", "-i", str(inv), "-o", str(run_dir), "-p", str(cli.home / "fleet-check.yml"),
                               "--ssh-config", str(sshd.ssh_config))
    return proc, fleet, run_dir, inv


@pytest.fixture(scope="module")
def replay_run(cli: Cli) -> dict[str, Any]:
    inv = cli.home / "replay.yml"
    inv.write_text(replay_inventory(HOSTS))
    proc, fleet = cli.run_json("run", "-i", str(inv), "-o", str(cli.home / "replay-run"),
                               "-p", str(cli.home / "fleet-check.yml"))
    assert proc.returncode == 1, proc.stderr
    return fleet


def test_every_probe_answers_over_ssh_from_the_fixture_machines(ssh_run: Any, sims: list[SimulatedHost]) -> None:
    proc, fleet, run_dir, _inv = ssh_run
    assert proc.returncode == 1, proc.stderr  # fail findings, and no host problem
    jsonschema.validate(fleet, SCHEMA)
    recs = hosts_by_name(fleet)
    assert list(recs) == HOSTS
    for sim in sims:
        rec = recs[sim.name]
        want = ["host", "pcie", "nvml", "nvlink"] + (["p2p"] if sim.name in ("dgx-h100-07", "dgx-a100-05") else [])
        assert {p: v["outcome"] for p, v in rec["probes"].items()} == {p: "ok" for p in want}, rec
        # The probes read the fixture, not this machine: the simulated hostname and GPUs.
        assert rec["facts"]["host"]["hostname"] == sim.name
        nvml = json.loads((run_dir / "raw" / sim.name / "nvml.json").read_text())
        assert nvml["data"]["library"] == str(sim.nvml_lib)
        host_env = json.loads((run_dir / "raw" / sim.name / "host.json").read_text())
        assert host_env["data"]["ssh_connection"].split()[2] == rec["address"]  # it came in over SSH


@pytest.mark.parametrize("name", HOSTS)
def test_each_host_gets_exactly_its_findings(ssh_run: Any, name: str) -> None:
    _proc, fleet, _run_dir, _inv = ssh_run
    assert finding_ids(fleet)[name] == EXPECTED[name]


def test_healthy_hosts_have_no_fail_or_warn(ssh_run: Any) -> None:
    _proc, fleet, _run_dir, _inv = ssh_run
    bad = finding_ids(fleet, ("fail", "warn"))
    assert all(not bad[h] for h in HEALTHY), {h: bad[h] for h in HEALTHY}
    assert {h for h, ids in bad.items() if ids} == set(HOSTS) - set(HEALTHY) - {"vm-a100-01"}


def test_ssh_run_and_replayed_recordings_agree(ssh_run: Any, replay_run: dict[str, Any]) -> None:
    """The demo recordings came from the same fixtures run locally: over SSH the judgement must match."""
    _proc, fleet, _run_dir, _inv = ssh_run
    assert finding_ids(fleet) == finding_ids(replay_run)
    over_ssh = {(f["host"], f["id"], f["severity"], f["subject"]) for f in fleet["findings"]}
    replayed = {(f["host"], f["id"], f["severity"], f["subject"]) for f in replay_run["findings"]}
    assert over_ssh == replayed
    ssh_recs, replay_recs = hosts_by_name(fleet), hosts_by_name(replay_run)
    for name in HOSTS:
        assert ssh_recs[name]["facts"]["topology"], name  # compared below: never None == None
        for section in ("topology", "nvlink"):
            assert ssh_recs[name]["facts"].get(section) == replay_recs[name]["facts"].get(section), (name, section)
    assert {c["name"]: sorted(c["members"]) for c in fleet["classes"]} == \
        {c["name"]: sorted(c["members"]) for c in replay_run["classes"]}


# ------------------------------------------------------------------- the other commands, once each


def test_hosts_list_and_graph_show_the_fleet_inventory(ssh_run: Any, cli: Cli, sims: list[SimulatedHost]) -> None:
    _proc, _fleet, _run_dir, inv = ssh_run
    listed = cli.run("hosts", "-i", str(inv), "--list")
    assert listed.returncode == 0, listed.stderr
    doc = json.loads(listed.stdout)
    hostvars = doc["_meta"]["hostvars"]
    assert sorted(hostvars) == sorted(HOSTS)
    for sim in sims:
        assert hostvars[sim.name]["probe_root"] == str(sim.root)
        assert hostvars[sim.name]["probe_args"]["nvml"]["lib"] == str(sim.nvml_lib)
    graph = cli.run("hosts", "-i", str(inv), "--graph")
    assert graph.returncode == 0, graph.stderr
    lines = graph.stdout.splitlines()
    assert lines[0] == "@all:"
    assert sorted(ln.rsplit("--", 1)[1] for ln in lines if not ln.rstrip().endswith(":")) == sorted(HOSTS)


def test_probes_and_playbooks_list_what_is_shipped(cli: Cli) -> None:
    probes = cli.run("probes")
    assert probes.returncode == 0, probes.stderr
    names = {ln.split()[0] for ln in probes.stdout.splitlines()[2:] if ln.strip()}
    assert {"host", "pcie", "nvml", "nvlink", "p2p"} <= names
    assert re.search(r"^p2p\s+\S+\s+active", probes.stdout, re.MULTILINE)  # the one that loads the GPUs
    books = cli.run("playbooks")
    assert books.returncode == 0 and {"audit", "premigration", "quick"} <= set(re.findall(r"^(\w+)\s", books.stdout, re.M))


def test_show_renders_the_stored_run(ssh_run: Any, cli: Cli) -> None:
    _proc, fleet, run_dir, _inv = ssh_run
    as_json = cli.run("show", str(run_dir), "--format", "json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == fleet
    table = cli.run("show", str(run_dir), "--hosts", "all")  # a row per host, healthy ones too
    assert table.returncode == 0, table.stderr
    for name in HOSTS:
        assert name in table.stdout
    for ids in EXPECTED.values():
        for fid in ids:
            assert fid in table.stdout


def test_rejudge_rebuilds_the_same_judgement_and_a_stricter_one(ssh_run: Any, cli: Cli) -> None:
    proc, fleet, run_dir, _inv = ssh_run
    same = cli.run("rejudge", str(run_dir), "--format", "json")
    # the exit status the run itself had: fail findings are not a clean bill on a second look
    assert same.returncode == proc.returncode == 1, same.stderr
    again = json.loads(same.stdout)
    assert finding_ids(again) == finding_ids(fleet)
    assert again["run"]["id"] != fleet["run"]["id"]
    # A stricter playbook judges the stored raw data anew, without touching a host.
    strict = cli.home / "strict.yml"
    strict.write_text("- name: bare metal only\n  hosts: all\n  probes: [host]\n  expect:\n    virtualization: none\n")
    stricter = json.loads(cli.run("rejudge", str(run_dir), "-p", str(strict), "--format", "json").stdout)
    rank = {"info": 0, "warn": 1, "fail": 2}
    before = {(f["host"], f["id"]): rank[f["severity"]] for f in fleet["findings"]}
    after = {(f["host"], f["id"]): rank[f["severity"]] for f in stricter["findings"]}
    assert set(after) >= set(before)
    changed = {k for k in after if after[k] != before.get(k)}
    # Only the VM is judged differently, and more severely: its GPU virtualization is now a problem.
    assert changed and {h for h, _ in changed} == {"vm-a100-01"}
    assert all(after[k] > before.get(k, -1) for k in changed)
    assert after[("vm-a100-01", "gpu.virtualization")] >= rank["warn"]


def test_report_writes_one_html_page_with_every_host(ssh_run: Any, cli: Cli) -> None:
    _proc, _fleet, run_dir, _inv = ssh_run
    out = cli.home / "x.html"
    proc = cli.run("report", str(run_dir), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert str(out) in proc.stdout
    html = out.read_text()
    assert html.lstrip().lower().startswith("<!doctype html")
    for name in HOSTS:
        assert name in html
    assert "nvlink.link.down" in html and "pcie.acs.enabled" in html


def test_diff_and_runs_show_a_host_that_became_unreachable(
    sshd: SshdServer, sims: list[SimulatedHost], cli: Cli
) -> None:
    pair = [s for s in sims if s.name in ("ws-a6000-02", "vm-a100-01")]
    hosts = ssh_hosts(sshd, pair)
    inv = cli.home / "pair.yml"
    common = ["--probe", "host", "--probe", "pcie", "--ssh-config", str(sshd.ssh_config)]
    inv.write_text(sshd.inventory_yaml(hosts))
    first, fleet1 = cli.run_json("run", "-i", str(inv), *common)
    assert first.returncode == 0, first.stderr
    with fakes.closed_port() as port:
        hosts[1].vars["ansible_port"] = port  # vm-a100-01 goes away
        inv.write_text(sshd.inventory_yaml(hosts))
        second, fleet2 = cli.run_json("run", "-i", str(inv), *common)
    assert second.returncode == 4, second.stderr
    assert hosts_by_name(fleet2)["vm-a100-01"]["outcome"] == "unreachable"

    # No arguments: the last two runs of one inventory, i.e. these two.
    diff = cli.run("diff", "--format", "json")
    assert diff.returncode == 0, diff.stderr
    doc = json.loads(diff.stdout)
    assert (doc["old_run"], doc["new_run"]) == (fleet1["run"]["id"], fleet2["run"]["id"])
    changes = doc["changes"]
    assert {(c["host"], c["kind"]) for c in changes} == {("vm-a100-01", "host.unreachable")}
    text = cli.run("diff", fleet1["run"]["id"], fleet2["run"]["id"])
    assert "vm-a100-01" in text.stdout and "ws-a6000-02" not in text.stdout

    runs = cli.run("runs", "--format", "json")
    assert runs.returncode == 0, runs.stderr
    rows = {r["id"]: r for r in json.loads(runs.stdout)}
    one, two = rows[fleet1["run"]["id"]], rows[fleet2["run"]["id"]]
    assert (one["hosts"], one["ok"], one["unreachable"]) == (2, 2, 0)
    assert (two["hosts"], two["ok"], two["unreachable"]) == (2, 1, 1)
