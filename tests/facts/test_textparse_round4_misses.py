"""Issue 48's smaller misses, each as a class of inputs built on the real outputs in
tests/fixtures/evidence (provenance in its SOURCES.md): every ibstat spelling of "stat of IB device
'X' failed" names X; a `topo -m` NUMA affinity that stands alone under its header as a range is
unknown, never a CPU list; a blank file in an import directory is no host (exit 4 before)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from orchestrator.facts.textparse.ibstat import parse_ib
from orchestrator.facts.textparse.importer import import_fleet, import_texts
from orchestrator.facts.textparse.topo import parse_topo_matrix
from tests.support.fleet import Cli

EVIDENCE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "evidence"

# ibstat's one-HCA failure as libibmad (ibpanic) and rdma-core (iberror, with and without debugging) print it
STAT_FAILED = [
    ("ibpanic: [1323906] main: stat of IB device 'mlx5_8' failed: No such file or directory", "No such file or directory"),
    ("ibpanic: [77] main: stat of IB device 'mlx5_8' failed: (Permission denied)", "Permission denied"),
    ("ibstat: iberror: failed: stat of IB device 'mlx5_8' failed", None),
    ("ibstat: iberror: [pid 4242] main: failed: stat of IB device 'mlx5_8' failed", None),
    ("[root@gpu01 ~]# ibstat: iberror: failed: stat of IB device 'mlx5_8' failed", None),
]


def _ibstat_block() -> str:
    text = (EVIDENCE / "ibstat_partial_elided_ibpanic_mlx5_8_gpud752_01.txt").read_text()
    return "\n".join(x for x in text.splitlines() if "stat of IB device" not in x) + "\n"


@pytest.mark.parametrize(("line", "reason"), STAT_FAILED)
@pytest.mark.parametrize("alone", [True, False])
def test_every_spelling_of_stat_failed_names_its_hca(line: str, reason: str | None, alone: bool) -> None:
    """Before: only libibmad's `ibpanic: [PID] fn: ... failed: REASON` was read; rdma-core's
    `iberror` line was skipped and mlx5_8 went unnamed."""
    text = line + "\n" if alone else _ibstat_block() + line + "\n"
    rep = parse_ib(text, "ib.txt")
    [dev] = [d for d in rep.devices if d["name"] == "mlx5_8"]
    assert dev["error"] == f"ibstat could not read it (stat failed: {reason or 'no reason printed'})"
    host = import_texts([("ib.txt", text)], None)
    assert host.errors == [] and any(d.get("error") for d in host.facts["nic"]["devices"])


_TOPO = (EVIDENCE / "topo_8x_h20_nv18_2nic_arthurchiao_01.txt").read_text()


def _old_header(cpu: str, numa: str) -> str:
    """The same matrix as a driver without the GPU NUMA ID column prints it, GPU0's affinity cells
    replaced, aligned under their headers as nvidia-smi aligns them."""
    lines = _TOPO.splitlines()
    head = next(i for i, x in enumerate(lines) if "CPU Affinity" in x)
    lines[head] = lines[head].replace("   GPU NUMA ID", "")
    numa_at = lines[head].index("NUMA Affinity")
    cpu_at = lines[head].index("CPU Affinity")
    for i, x in enumerate(lines):
        if x.startswith("GPU") and "0-95,192-287" in x:
            cells = x[:cpu_at].rstrip()
            lines[i] = (cells.ljust(cpu_at) + cpu).ljust(numa_at) + numa if i == head + 1 else \
                (cells.ljust(cpu_at) + "0-95,192-287").ljust(numa_at) + "0"
    return "\n".join(x.rstrip() for x in lines) + "\n"


@pytest.mark.parametrize("numa", ["0-3", "0-1", "0,2", "0-1,4-5"])
def test_a_numa_range_alone_under_its_header_is_unknown_not_a_cpu_list(numa: str) -> None:
    """Before: with the CPU Affinity cell empty, `0-3` under NUMA Affinity was read as GPU0's CPU list."""
    m = parse_topo_matrix(_old_header("", numa))
    gpu0 = m.devices[0]
    assert gpu0.cpu_affinity is None and gpu0.numa_affinity is None
    assert "cpu_affinity" in gpu0.unknown and "numa_affinity" in gpu0.unknown
    assert any("cannot tell which affinity column" in n.text for n in m.notes)
    assert m.devices[1].cpu_affinity == "0-95,192-287" and m.devices[1].numa_affinity == 0


@pytest.mark.parametrize(("cpu", "numa", "want_cpu", "want_nodes"), [
    ("0-95", "0-3", "0-95", "0-3"),
    ("0-95", "", "0-95", None),
    ("", "", None, None),
    ("0-95,192-287", "0-1", "0-95,192-287", "0-1"),
])
def test_ranges_and_empty_cells_beside_a_cpu_list_read_as_printed(cpu: str, numa: str, want_cpu: str | None,
                                                                  want_nodes: str | None) -> None:
    gpu0 = parse_topo_matrix(_old_header(cpu, numa)).devices[0]
    assert (gpu0.cpu_affinity, gpu0.numa_affinity, gpu0.numa_nodes) == (want_cpu, None, want_nodes)
    assert "numa_affinity" in gpu0.unknown and "None" not in str(gpu0.unknown)


BLANKS = ["", "\n", "\n\n  \n", "\t\r\n"]


@pytest.mark.parametrize("blank", BLANKS)
def test_a_blank_file_in_an_import_directory_is_no_host(tmp_path: Path, blank: str) -> None:
    (tmp_path / "gpu07.topo.txt").write_text(_TOPO)
    (tmp_path / "gpu07.err").write_text(blank)
    (tmp_path / "slurm-4242.err").write_text(blank)
    (tmp_path / "gpu08").mkdir()
    (tmp_path / "gpu08" / "topo.txt").write_text(_TOPO)
    (tmp_path / "gpu08" / "run.err").write_text(blank)
    skipped: list[str] = []
    hosts = import_fleet(tmp_path, None, skipped)
    assert sorted(hosts) == ["gpu07", "gpu08"]
    assert all(h.errors == [] for h in hosts.values())
    assert sorted(Path(x.split(":")[0]).name for x in skipped) == ["gpu07.err", "run.err", "slurm-4242.err"]


def test_a_file_with_text_stays_evidence(tmp_path: Path) -> None:
    (tmp_path / "slurm-4242.err").write_text("srun: error: gpu07: task 0: Exited with exit code 1\n")
    skipped: list[str] = []
    hosts = import_fleet(tmp_path, None, skipped)
    assert list(hosts) == ["slurm-4242"] and hosts["slurm-4242"].errors and skipped == []


def test_probe_import_fleet_with_an_empty_err_exits_0_and_says_it(tmp_path: Path) -> None:
    """Before: `slurm-4242` became a host with invalid_output, and the import exited 4."""
    fleet = tmp_path / "fleet"
    fleet.mkdir()
    (fleet / "gpu07.topo.txt").write_text(_TOPO)
    (fleet / "slurm-4242.err").write_text("")
    res = Cli.create(tmp_path).run("import", "--fleet", str(fleet), "--results", str(tmp_path / "runs"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "slurm-4242.err: empty" in res.stderr and "slurm-4242" not in res.stdout
    assert "Traceback" not in res.stderr and not re.search(r"\bNone\b", res.stdout)
