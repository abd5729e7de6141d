"""perftest and multi-node nccl-tests text -> facts["fabric"] (pure; shape in docs/facts-fabric.md).

What text can say: a perftest output names its own HCA (`Device : mlx5_0`), the peer only by the
remote LID it prints (its GID on RoCE, where the LID is 0), and carries no round or rail of a plan (round 0, rail 0); a multi-node
nccl-tests output names its hosts (`Rank N ... on HOST device D`), its sizes and bus bandwidths and,
where NCCL's INFO lines were kept, the network transport.  Unknown values stay null.

The nccl-tests runs go through the fabric normalizer as the NCCL groups of a live run (one writer,
issue 48); the perftest runs share `fill_figures` with the probe's road (the normalizer parses the
probe's stored stdout per run, and names a failed run by its last line, which text does not split).
"""

from __future__ import annotations

from typing import Any

from orchestrator.facts.model import FabricFacts, FabricMeasure
from orchestrator.facts.normalize import fabric as fabric_normalize
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


def _group(i: int, run: NcclRun) -> dict[str, Any]:
    """A multi-node nccl-tests run as the fabric envelope holds an NCCL group (the nccl probe's data
    of one communicator), for the fabric normalizer: results, NCCL's INFO lines, the rank count."""
    return {"group": f"text{i}:{run.source}", "kind": "text", "members": list(run.hosts),
            "data": {"results": [{"op": run.op, **r} for r in run.results], "debug_lines": list(run.info_lines),
                     "comm": {"nranks": run.ranks}}}


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
        # the groups through the fabric normalizer: transport, GDR and bus bandwidth read as a live run's
        "nccl": fabric_normalize.normalize({"nccl": [_group(i, r) for i, r in enumerate(multi)]})["nccl"],
        "plan": None, "errors": [],
    }
    return dict(facts)
