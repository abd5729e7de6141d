"""perftest whole (issue 48): every size row, peak and average bandwidth, message rate, every latency
column, the link type, the peer by GID on RoCE, the unit as printed; read the same on the probe's road
and the import's; a cut or rewrapped paste gives one clear message, never a smaller message's figure.
Real outputs with provenance in tests/fixtures/fabric/SOURCES.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.facts.normalize.fabric import measurement
from orchestrator.facts.textparse.importer import import_texts
from orchestrator.facts.textparse.perftest import CUT, parse_perftest
from tests.support.fleet import Cli

FIX = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "fabric"

# file -> (peer, link type, unit, rows, value, peak Gb/s, Mpps, latency of the figure's row)
REAL: dict[str, tuple[str, str, str | None, int, float, float | None, float | None, dict[str, float] | None]] = {
    "ib_write_bw_a_roce_gbits_egx_rdma_pod_01.txt":
        ("GID ::ffff:10.110.16.103", "Ethernet", "Gb/sec", 23, 83.75, 83.78, 0.001248, None),
    "ib_write_bw_rxe_mib_container_k8s_netperf_01.txt":
        ("GID fe80::4199:8110:78a5:6ee7", "Ethernet", "MiB/sec", 1, 8.596, 8.66, 0.016396, None),
    "ib_write_bw_a_hdr_cx6_2node_client_01.txt":
        ("LID 0x6e", "IB", "MB/sec", 23, 195.603, 195.68, 0.002915, None),
    "ib_read_lat_roce_k8s_pod_client_01.txt":
        ("GID ::ffff:172.31.1.1", "Ethernet", None, 1, 4.83, None, None,
         {"t_min_us": 4.7, "t_max_us": 13.2, "t_typical_us": 4.83, "t_avg_us": 4.82, "t_stdev_us": 0.0,
          "t_p99_us": 4.91, "t_p999_us": 13.2}),
    "ib_write_lat_a_hdr_cx6_2node_client_01.txt":
        ("LID 0x6e", "IB", None, 23, 1.87, None, None,
         {"t_min_us": 1.79, "t_max_us": 5.41, "t_typical_us": 1.87, "t_avg_us": 1.88, "t_stdev_us": 0.18,
          "t_p99_us": 2.03, "t_p999_us": 5.41}),
}


def _one(name: str, text: str) -> dict[str, Any]:
    host = import_texts([(name, text)], "perftest")
    assert host.errors == [], host.errors
    [m] = host.facts["fabric"]["measurements"]
    return dict(m)


@pytest.mark.parametrize("name", sorted(REAL))
def test_a_real_output_imports_whole(name: str) -> None:
    peer, link, unit, rows, value, peak, rate, lat = REAL[name]
    m = _one(name, (FIX / name).read_text())
    assert (m["peer"], m["link_type"], m["unit"], len(m["rows"]), m["value"]) == (peer, link, unit, rows, value)
    assert (m["peak_gbps"], m["msg_rate_mpps"], m["latency"]) == (peak, rate, lat)
    assert m["error"] is None and "LID 0x0" not in m["peer"]
    sizes = [r["size"] for r in m["rows"]]
    assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes)


def test_every_row_keeps_its_figures() -> None:
    m = _one("egx.txt", (FIX / "ib_write_bw_a_roce_gbits_egx_rdma_pod_01.txt").read_text())
    assert m["rows"][0] == {"size": 2, "iters": 5000, "bw_peak_gbps": 0.074, "bw_avg_gbps": 0.073,
                            "msg_rate_mpps": 4.535869}
    assert m["rows"][15] == {"size": 65536, "iters": 5000, "bw_peak_gbps": 88.08, "bw_avg_gbps": 88.08,
                             "msg_rate_mpps": 0.167992}
    assert m["remote"] == {"lid": 0, "qpn": "0x0109", "gid": "00:00:00:00:00:00:00:00:00:00:255:255:10:110:16:103"}


@pytest.mark.parametrize("name", sorted(REAL))
def test_the_probe_s_road_and_the_import_s_say_the_same(name: str) -> None:
    text = (FIX / name).read_text()
    test = "ib_read_lat" if "read_lat" in name else "ib_write_lat" if "_lat_" in name else "ib_write_bw"
    live = measurement({"round": 0, "rail": 0, "hca": "mlx5_0", "peer": "node-1", "role": "client", "test": test,
                        "stdout": text, "stderr": "", "exit": 0})
    assert live is not None
    imported = _one(name, text)
    for key in ("value", "p99_us", "size", "peak_gbps", "msg_rate_mpps", "latency", "link_type", "remote",
                "unit", "rows"):
        assert live[key] == imported[key], key  # type: ignore[literal-required]


def _cut_in_table(text: str) -> str:
    """The paste ends inside the table: the last row keeps its size and iterations only."""
    lines = text.splitlines()
    rows = [i for i, x in enumerate(lines) if x.split()[:1] and x.split()[0].isdigit() and len(x.split()) >= 4]
    keep = rows[len(rows) // 2]
    return "\n".join([*lines[:keep], " ".join(lines[keep].split()[:2])]) + "\n"


def _rewrapped(text: str) -> str:
    """A terminal 40 columns wide: every table row continues on the next line."""
    out = []
    for x in text.splitlines():
        toks = x.split()
        if toks[:1] and toks[0].isdigit() and len(toks) >= 4:
            out += [" " + "  ".join(toks[:3]), "  ".join(toks[3:])]
        else:
            out.append(x)
    return "\n".join(out) + "\n"


BW = ["ib_write_bw_a_roce_gbits_egx_rdma_pod_01.txt", "ib_write_bw_a_hdr_cx6_2node_client_01.txt"]


@pytest.mark.parametrize("name", BW)
def test_a_cut_bandwidth_table_has_no_figure_and_says_why(name: str) -> None:
    """Before: the last whole row's (a smaller message's) bandwidth stood for the link."""
    m = _one(name, _cut_in_table((FIX / name).read_text()))
    assert m["value"] is None and m["rows"] and m["error"] is not None
    assert "cut" in m["error"] and "paste the whole ib_write_bw output" in m["error"]
    assert "None" not in m["error"]


@pytest.mark.parametrize("name", sorted(REAL))
def test_a_rewrapped_paste_reads_as_the_original(name: str) -> None:
    """Before: every wrapped row was 'not a perftest line' and the run had no figure."""
    text = (FIX / name).read_text()
    assert _one(name, _rewrapped(text)) == _one(name, text)


@pytest.mark.parametrize("name", sorted(REAL))
@pytest.mark.parametrize("mangle", [lambda t: t.replace("\n", "\r\n"),
                                    lambda t: "\x1b[1m" + t.replace("#bytes", "\x1b[32m#bytes\x1b[0m"),
                                    lambda t: t[: t.index("#bytes")]])
def test_hostile_variants_give_one_clear_message(name: str, mangle: Any) -> None:
    text = mangle((FIX / name).read_text())
    log = parse_perftest(text)
    m = _one(name, text)
    if m["value"] is None:  # the table gone: one line that says what to paste
        assert m["error"] is not None and m["error"].startswith("no result row") and "paste the whole" in m["error"]
    else:
        assert m["value"] == REAL[name][4]
    assert all("None" not in n.text for n in log.notes)


def test_a_short_row_is_named_as_cut() -> None:
    text = (FIX / "ib_write_lat_a_hdr_cx6_2node_client_01.txt").read_text()
    log = parse_perftest(_cut_in_table(text))
    assert any(CUT in n.text for n in log.notes)
    assert log.runs[0].result() is not None  # a latency run stands for its smallest message: still there


def test_probe_import_of_a_cut_paste_exits_cleanly(tmp_path: Path) -> None:
    path = tmp_path / "cut.txt"
    path.write_text(_cut_in_table((FIX / "ib_write_bw_a_roce_gbits_egx_rdma_pod_01.txt").read_text()))
    cli = Cli.create(tmp_path)
    res = cli.run("import", str(path), "--results", str(tmp_path / "runs"))
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr + res.stdout and "row cut short" in res.stdout
