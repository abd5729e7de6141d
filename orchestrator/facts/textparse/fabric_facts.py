"""perftest and multi-node nccl-tests text -> facts["fabric"] (pure; shape in docs/facts-fabric.md).

What text can say: a perftest output names its own HCA (`Device : mlx5_0`), the peer only by the
remote LID it prints (its GID on RoCE, where the LID is 0), and carries no round or rail of a plan (round 0, rail 0); a multi-node
nccl-tests output names its hosts (`Rank N ... on HOST device D`), its sizes and bus bandwidths and,
where NCCL's INFO lines were kept, the network transport.  Unknown values stay null.
"""

from __future__ import annotations

from typing import Any

from orchestrator.facts.model import FabricFacts, FabricMeasure, FabricNcclGroup, NcclResult
from orchestrator.facts.normalize.nccl import largest_allreduce
from orchestrator.facts.textparse.bench import NcclRun
from orchestrator.facts.textparse.perftest import PerftestLog, fill_figures, peer_name


def _measurements(log: PerftestLog) -> list[FabricMeasure]:
    out: list[FabricMeasure] = []
    for run in log.runs:
        m: FabricMeasure = {
            "round": 0, "rail": 0, "hca": run.device or "?", "peer": peer_name(run),
            "peer_hca": None, "role": "unknown", "test": run.tool, "kind": run.kind, "extra": False,
            "value": None, "p99_us": None, "size": None, "use_cuda": None, "gdr_error": None,
            "error": None, "error_kind": None,
        }
        fill_figures(m, run)
        if run.result() is None:
            m["error"] = run.why_no_figure()
            m["error_kind"] = run.error_kind or "failed"
        out.append(m)
    if not log.runs and log.errors:
        out.append({"round": 0, "rail": 0, "hca": "?", "peer": "?", "peer_hca": None, "role": "unknown",
                    "test": "perftest", "kind": "bw", "extra": False, "value": None, "p99_us": None, "size": None,
                    "use_cuda": None, "gdr_error": None, "error": log.errors[0], "error_kind": log.error_kind or "failed"})
    return out


def _transport(run: NcclRun) -> tuple[str | None, bool | None]:
    net = {k: v for k, v in run.transports.items() if k.startswith("NET/")}
    if not net:
        return None, None
    total = sum(net.values())
    gdr = sum(v for k, v in net.items() if k.endswith("/GDRDMA"))
    kind = max(net.items(), key=lambda kv: kv[1])[0].split("/")[1]
    return f"NET/{kind}" + ("/GDRDMA" if gdr * 2 >= total else ""), gdr * 2 >= total


def _group(i: int, run: NcclRun) -> FabricNcclGroup:
    results: list[NcclResult] = []
    for r in run.results:
        results.append({"op": run.op, "size_bytes": int(r["size_bytes"]), "count": r.get("count"),
                        "dtype": r.get("dtype"), "redop": r.get("redop"), "time_us": r.get("time_us"),
                        "algbw_gbps": r.get("algbw_gbps"), "busbw_gbps": r.get("busbw_gbps"),
                        "in_place": bool(r.get("in_place")), "wrong": r.get("wrong")})
    transport, gdr = _transport(run)
    wrong = [r["wrong"] for r in results if r["wrong"] is not None]
    return {"group": f"text{i}:{run.source}", "kind": "text", "rail": None, "hca": None, "members": list(run.hosts),
            "ranks": run.ranks, "transport": transport, "gdr": gdr,
            "busbw_gbps": largest_allreduce(results) if run.op == "all_reduce" else None,
            "results": results, "wrong": sum(wrong) if wrong else None, "error": None}


def fabric_from_text(perftest: list[PerftestLog], nccl: list[NcclRun]) -> dict[str, Any] | None:
    """The fabric section of one host's text evidence; None when none of it is about the fabric
    (perftest output, or nccl-tests over more than one host)."""
    multi = [r for r in nccl if len(r.hosts) > 1]
    if not perftest and not multi:
        return None
    measurements = [m for log in perftest for m in _measurements(log)]
    facts: FabricFacts = {
        "source": "text", "skipped": None, "hcas": [], "gpus": [], "gdr": None,
        "perftest": {"tools": {}, "cuda": None, "missing": []}, "measurements": measurements,
        "nccl": [_group(i, r) for i, r in enumerate(multi)], "plan": None, "errors": [],
    }
    return dict(facts)
