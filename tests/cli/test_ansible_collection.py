"""The generated Ansible collection fleetprobe.gpu under real ansible-core and ansible-runner.

20 simulated machines behind the loopback sshd are probed three ways: `probe run`, and an
ansible-runner job of `fleetprobe.gpu.audit` with the collection's callback enabled, whose run
directory is written by the callback and, from the job's artifacts, by `probe import
--ansible-runner`.  All three must judge alike.  The same inventory file serves both engines.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.store.compact import read_plain
from tests.support.collected import finding_keys, latest_run
from tests.support.fleet import Cli, SimulatedHost, build_simulated_fleet, hosts_by_name, ssh_hosts
from tests.support.sshd import SshdServer

pytestmark = [pytest.mark.ssh, pytest.mark.slow]

BIN = Path(sys.executable).parent
# 20 of the demo machines (healthy and faulty); the audit playbook: no P2P test
HOSTS = ["dgx-h100-01", "dgx-h100-02", "dgx-h100-03", "dgx-h100-04", "dgx-h100-05", "dgx-h100-06", "dgx-h100-09",
         "dgx-h100-10", "dgx-h100-11", "lenovo-h100-01", "dgx-a100-01", "dgx-a100-02", "dgx-a100-03", "dgx-a100-04",
         "dgx-a100-06", "dgx1-v100-01", "dgx1-v100-02", "rtx4090-02", "ws-a6000-02", "vm-a100-01"]


def _tool(name: str) -> str:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} not installed (pip install -e '.[test]' brings ansible-core and ansible-runner)")
    return str(path)


def _env(cli: Cli, **extra: str) -> dict[str, str]:
    return {**cli.env(), "PATH": f"{BIN}:{os.environ.get('PATH', '')}", "ANSIBLE_NOCOLOR": "1",
            "ANSIBLE_LOCAL_TEMP": str(cli.home / ".ansible-tmp"), **extra}


@pytest.fixture(scope="module")
def setup(sshd: SshdServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    _tool("ansible-playbook")
    if not shutil.which("gcc") and not shutil.which("cc"):
        pytest.skip("the fake NVML library needs gcc")
    tmp = tmp_path_factory.mktemp("ansible")
    cli = Cli.create(tmp)
    sims: list[SimulatedHost] = build_simulated_fleet(HOSTS, tmp / "sim")
    hosts = ssh_hosts(sshd, sims)
    ssh_common = f"-F {sshd.ssh_config} -o UserKnownHostsFile={sshd.known_hosts} -o StrictHostKeyChecking=yes"
    for h in hosts:  # one interpreter for both engines; Ansible reads the same known_hosts as probe run
        h.vars.update(ansible_python_interpreter=sys.executable, ansible_ssh_common_args=ssh_common)
    inv = tmp / "fleet.yml"
    inv.write_text(sshd.inventory_yaml(hosts))
    made = cli.run("ansible-collection", str(tmp / "collections"))
    assert made.returncode == 0, made.stderr
    return {"cli": cli, "inv": inv, "tmp": tmp, "collections": tmp / "collections", "sshd": sshd,
            "root": tmp / "collections" / "ansible_collections" / "fleetprobe" / "gpu"}


@pytest.fixture(scope="module")
def live(setup: dict[str, Any]) -> dict[str, Any]:
    cli: Cli = setup["cli"]
    proc, fleet = cli.run_json("run", "-i", str(setup["inv"]), "--ssh-config", str(setup["sshd"].ssh_config))
    assert proc.returncode == 1, proc.stderr
    return fleet


@pytest.fixture(scope="module")
def job(setup: dict[str, Any]) -> dict[str, Any]:
    runner = _tool("ansible-runner")
    cli: Cli = setup["cli"]
    pdd = setup["tmp"] / "job"
    (pdd / "project").mkdir(parents=True)
    (pdd / "project" / "site.yml").write_text("- import_playbook: fleetprobe.gpu.audit\n")
    results = setup["tmp"] / "callback-runs"
    env = _env(cli, ANSIBLE_COLLECTIONS_PATH=str(setup["collections"]),
               ANSIBLE_CALLBACKS_ENABLED="fleetprobe.gpu.fleetprobe", FLEETPROBE_RESULTS=str(results))
    (pdd / "env").mkdir()
    (pdd / "env" / "envvars").write_text(json.dumps({k: env[k] for k in (
        "ANSIBLE_COLLECTIONS_PATH", "ANSIBLE_CALLBACKS_ENABLED", "FLEETPROBE_RESULTS", "ANSIBLE_NOCOLOR",
        "ANSIBLE_LOCAL_TEMP")}))
    proc = subprocess.run([runner, "run", str(pdd), "-p", "site.yml", "--inventory", str(setup["inv"]),
                           "--ident", "audit1"], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "fleetprobe run: " in proc.stdout, proc.stdout[-3000:]
    # the callback's summary is the verdict's: hosts by health
    assert re.search(r"fleetprobe run: \S+ \(\d+ host\(s\): \d+ (failed|degraded|healthy|incomplete|unreachable)",
                     proc.stdout), proc.stdout[-3000:]
    return {"proc": proc, "artifacts": pdd / "artifacts" / "audit1", "callback_run": latest_run(results)}


def test_the_collection_is_generated_for_every_probe_and_playbook(setup: dict[str, Any]) -> None:
    from orchestrator.api.ansible_collection import collection_files
    from orchestrator.engine import payload

    root: Path = setup["root"]
    mods = sorted(p.stem for p in (root / "plugins" / "modules").glob("*.py"))
    assert mods == sorted(payload.catalog())
    assert sorted(p.stem for p in (root / "playbooks").glob("*.yml")) == ["audit", "premigration", "quick"]
    # generated, byte for byte the same on every run: nothing in it is kept by hand
    written = {str(p.relative_to(root)): p.read_text() for p in root.rglob("*") if p.is_file()}
    assert written == collection_files()


def test_galaxy_builds_and_installs_the_collection(setup: dict[str, Any], tmp_path: Path) -> None:
    galaxy = _tool("ansible-galaxy")
    env = _env(setup["cli"])
    built = subprocess.run([galaxy, "collection", "build", str(setup["root"]), "--output-path", str(tmp_path)],
                           env=env, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    tarball = next(tmp_path.glob("fleetprobe-gpu-*.tar.gz"))
    installed = subprocess.run([galaxy, "collection", "install", str(tarball), "-p", str(tmp_path / "cols")],
                               env=env, capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert (tmp_path / "cols" / "ansible_collections" / "fleetprobe" / "gpu" / "plugins" / "modules" / "nvml.py").is_file()


def test_a_module_returns_the_envelope_unchanged_in_check_mode(setup: dict[str, Any]) -> None:
    ansible = _tool("ansible")
    env = _env(setup["cli"], ANSIBLE_COLLECTIONS_PATH=str(setup["collections"]))
    proc = subprocess.run([ansible, "-i", str(setup["inv"]), HOSTS[0], "--check", "-o", "-m", "fleetprobe.gpu.host",
                           "-a", json.dumps({"args": {"root": "/nonexistent-root"}, "timeout": 30})],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith(f"{HOSTS[0]} | SUCCESS => "))
    res = json.loads(line.split(" => ", 1)[1])
    assert res["changed"] is False
    env_ = res["envelope"]
    assert env_["envelope_version"] == 1 and env_["probe"] == "host"
    assert res["fleetprobe_answer"]["exit"] == 0 and res["fleetprobe_answer"]["timed_out"] is False


def test_the_callback_run_has_the_findings_of_probe_run(live: dict[str, Any], job: dict[str, Any],
                                                        setup: dict[str, Any]) -> None:
    run_dir: Path = job["callback_run"]
    fleet = read_plain(run_dir / "fleet.json")
    assert live["findings"]
    assert finding_keys(fleet["findings"]) == finding_keys(live["findings"])
    assert list(hosts_by_name(fleet)) == [h["name"] for h in live["hosts"]]  # the inventory's order
    want = hosts_by_name(live)
    for name, rec in hosts_by_name(fleet).items():
        assert {p: s["outcome"] for p, s in rec["probes"].items()} == \
            {p: s["outcome"] for p, s in want[name]["probes"].items()}, name
        assert rec["class"] == want[name]["class"]
        assert rec["groups"] == want[name]["groups"]
    assert fleet["summary"] == live["summary"]
    # a fleetprobe run like any other: shown, re-judged, reported
    cli: Cli = setup["cli"]
    shown = cli.run("show", str(run_dir), "-q")
    assert shown.returncode == 0 and "nvlink.link.down" in shown.stdout, shown.stderr
    again = cli.run("rejudge", str(run_dir), "--format", "json")
    assert again.returncode == 1, again.stderr
    assert finding_keys(json.loads(again.stdout)["findings"]) == finding_keys(live["findings"])
    report = cli.run("report", str(run_dir), "-o", str(setup["tmp"] / "ansible.html"))
    assert report.returncode == 0, report.stderr


def test_the_job_artifacts_import_to_the_same_findings(live: dict[str, Any], job: dict[str, Any],
                                                       setup: dict[str, Any]) -> None:
    cli: Cli = setup["cli"]
    out = setup["tmp"] / "imported-runs"
    proc = cli.run("import", "--ansible-runner", str(job["artifacts"]), "-i", str(setup["inv"]),
                   "--results", str(out), "--format", "json")
    assert proc.returncode == 1, proc.stderr
    fleet = json.loads(proc.stdout)
    assert finding_keys(fleet["findings"]) == finding_keys(live["findings"])
    assert fleet["summary"] == live["summary"]
    diff = cli.run("diff", str(job["callback_run"]), str(latest_run(out)))
    assert diff.returncode == 0 and "no change" in diff.stdout, diff.stdout + diff.stderr


# The sanity tests that run in a virtual environment of their own, which ansible-test bootstraps with
# a pip script from ci-files.testing.ansible.com (not a package registry): not reachable here.  Their
# main concern, that every plugin's documentation parses, is checked with ansible-doc below.
NEEDS_VENV = ("ansible-doc", "import", "pep8", "pylint", "runtime-metadata", "validate-modules", "yamllint",
              "pslint", "shellcheck")


def test_ansible_test_sanity_and_ansible_doc(setup: dict[str, Any]) -> None:
    ansible_test, ansible_doc = _tool("ansible-test"), _tool("ansible-doc")
    env = _env(setup["cli"], ANSIBLE_COLLECTIONS_PATH=str(setup["collections"]))
    skips = [a for t in NEEDS_VENV for a in ("--skip-test", t)]
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    proc = subprocess.run([ansible_test, "sanity", "--local", "--python", py, *skips], cwd=setup["root"], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ran = [ln for ln in proc.stdout.splitlines() if ln.startswith("Running sanity test")]
    assert len(ran) >= 10, proc.stdout
    from orchestrator.engine import payload

    for name in sorted(payload.catalog()):
        doc = subprocess.run([ansible_doc, "-j", f"fleetprobe.gpu.{name}"], env=env, capture_output=True, text=True,
                             timeout=120)
        assert doc.returncode == 0, doc.stderr
        parsed = json.loads(doc.stdout)[f"fleetprobe.gpu.{name}"]
        assert parsed["doc"]["attributes"]["check_mode"]["support"] == "full"
        assert set(parsed["doc"]["options"]) == {"args", "timeout"}
    doc = subprocess.run([ansible_doc, "-t", "callback", "-j", "fleetprobe.gpu.fleetprobe"], env=env,
                         capture_output=True, text=True, timeout=120)
    assert doc.returncode == 0, doc.stderr
    assert json.loads(doc.stdout)["fleetprobe.gpu.fleetprobe"]["doc"]["type"] == "aggregate"
