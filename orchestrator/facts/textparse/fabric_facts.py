"""perftest and multi-node nccl-tests text -> facts["fabric"] (pure; shape in docs/facts-fabric.md).

What text can say: a perftest output names its own HCA (`Device : mlx5_0`), the peer only by the
remote LID it prints (its GID on RoCE, where the LID is 0), and carries no round or rail of a plan (round 0, rail 0); a multi-node
nccl-tests output names its hosts (`Rank N ... on HOST device D`), its sizes and bus bandwidths and,
where NCCL's INFO lines were kept, the network transport.  Unknown values stay null.

The nccl-tests runs go through the fabric normalizer as the NCCL groups of a live run (one writer,
issue 48); a perftest run becomes the normalizer's measurement record (`blank_measure`) with its
figures from `fill_figures`, as on the probe's road (which parses the probe's stored stdout per run
and names a failed run by its last line, which text does not split).
"""

from __future__ import annotations

from typing import Any

from orchestrator.facts.model import FabricFacts, FabricMeasure
from orchestrator.facts.normalize import fabric as fabric_normalize
from orchestrator.facts.textparse.bench import NcclRun
from orchestrator.facts.textparse.perftest import PerftestLog, fill_figures, peer_name


def _measurements(log: PerftestLog) -> list[FabricMeasure]:
    """Each run as the fabric normalizer's measurement (fabric_normalize.blank_measure, then the
    figures through `fill_figures`, as the probe's road): a failed run is named by why the parser
    found no figure, as text does not split a run's stdout from its stderr."""
    out: list[FabricMeasure] = []
    for run in log.runs:
        m = fabric_normalize.blank_measure(run.tool, run.device or "?", peer_name(run), kind=run.kind)
        fill_figures(m, run)
        if run.result() is None:
            m["error"] = run.why_no_figure()
            m["error_kind"] = run.error_kind or "failed"
        out.append(m)
    if not log.runs and log.errors:
        m = fabric_normalize.blank_measure("perftest", "?", "?", kind="bw", error=log.errors[0])
        m["error_kind"] = log.error_kind or "failed"
        out.append(m)
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
