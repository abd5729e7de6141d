"""Normalize a host's fabric data into `facts["fabric"]` (pure; shape in docs/facts-fabric.md).

The host's raw `fabric` envelope is what the qualification driver (api/fabric.py) stored of it:
its discovery, the plan it took part in, every wave's `pairs` process (each perftest run's stdout,
bounded) and every NCCL communicator it was a rank of (the nccl probe's data).  The perftest
outputs are parsed here (facts/textparse/perftest.py, the same parser `probe import` uses), so a
stored run is read again with today's parser.
"""

from __future__ import annotations

import re
from typing import Any

from orchestrator.facts.model import (
    FabricFacts,
    FabricGdr,
    FabricHca,
    FabricLink,
    FabricMeasure,
    FabricNcclGroup,
    FabricPlan,
)
from orchestrator.facts.normalize.nccl import _result as nccl_result
from orchestrator.facts.normalize.nccl import largest_allreduce
from orchestrator.facts.textparse.perftest import ERRORS, fill_figures, parse_perftest
from orchestrator.facts.textsafe import one_line

# NCCL's channel lines across hosts: "... [send] via NET/IB/0/GDRDMA", "via NET/Socket/1"
_NET_VIA = re.compile(r"\bvia (NET/(\w+)(?:/\d+)?(/GDRDMA)?)")


def _s(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _i(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _f(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _list(v: Any) -> list[Any]:
    return v if isinstance(v, list) else []


def _link(raw: Any) -> FabricLink | None:
    d = _dict(raw)
    if not d:
        return None
    return {"speed": _s(d.get("speed")), "width": _i(d.get("width")), "max_speed": _s(d.get("max_speed")),
            "max_width": _i(d.get("max_width"))}


def _hcas(discover: dict[str, Any], plan: dict[str, Any]) -> list[FabricHca]:
    rail_of = _dict(plan.get("rail_of"))
    addresses = _dict(plan.get("addresses"))
    out: list[FabricHca] = []
    for h in _list(discover.get("hcas")):
        if not isinstance(h, dict) or not isinstance(h.get("hca"), str):
            continue
        name = h["hca"]
        out.append({
            "hca": name, "port": _i(h.get("port")), "rail": _i(rail_of.get(name)), "state": _s(h.get("state")),
            "link_layer": _s(h.get("link_layer")), "rate": _s(h.get("rate")), "rate_gbps": _f(h.get("rate_gbps")),
            "width": _i(h.get("width")), "lid": _s(h.get("lid")), "port_guid": _s(h.get("port_guid")),
            "node_guid": _s(h.get("node_guid")), "bus_id": _s(h.get("bus_id")), "pcie": _link(h.get("pcie")),
            "numa_node": _i(h.get("numa_node")), "nearest_gpu": _s(h.get("nearest_gpu")),
            "address": _s(addresses.get(name)) or _s(h.get("address")),
        })
    return out


def gdr_expectation(discover: dict[str, Any]) -> FabricGdr | None:
    """Whether GPUDirect RDMA should carry this host's GPU traffic: GPUs and HCAs present and a
    peer-memory client loaded (nvidia_peermem, nv_peer_mem) or DMA-BUF supported by the GPUs."""
    if not discover:
        return None
    gdr = _dict(discover.get("gdr"))
    peermem, old, dmabuf = gdr.get("nvidia_peermem"), gdr.get("nv_peer_mem"), gdr.get("dmabuf")
    gpus, hcas = _list(discover.get("gpus")), _list(discover.get("hcas"))
    if not gpus or not hcas:
        expected, why = False, "no GPU" if not gpus else "no InfiniBand/RoCE port"
    elif peermem is True or old is True:
        expected, why = True, ("nvidia_peermem" if peermem is True else "nv_peer_mem") + " is loaded"
    elif dmabuf is True:
        expected, why = True, "the GPUs support DMA-BUF"
    elif dmabuf is None:
        expected, why = None, "no peer-memory module loaded, and DMA-BUF support unknown (libcuda did not load)"
    else:
        expected, why = False, "no peer-memory module loaded and the GPUs do not support DMA-BUF"
    return {"expected": expected, "why": why, "nvidia_peermem": peermem if isinstance(peermem, bool) else None,
            "nv_peer_mem": old if isinstance(old, bool) else None, "dmabuf": dmabuf if isinstance(dmabuf, bool) else None}


def _error_kind(text: str) -> str | None:
    return next((kind for kind, rx in ERRORS if rx.search(text)), None)


def blank_measure(test: str, hca: str, peer: str, *, step: tuple[int, int] = (0, 0), role: str = "unknown",
                  kind: str | None = None, peer_hca: str | None = None, extra: bool = False,
                  use_cuda: int | None = None, gdr_error: str | None = None,
                  error: str | None = None) -> FabricMeasure:
    """A measurement before its figures: who measured what against whom.  A text source knows no
    plan: round 0, rail 0 and role "unknown" are its defaults (docs/facts-fabric.md)."""
    return {"round": step[0], "rail": step[1], "hca": hca, "peer": peer, "peer_hca": peer_hca, "role": role,
            "test": test, "kind": kind or ("lat" if test.endswith("_lat") else "bw"), "extra": extra,
            "value": None, "p99_us": None, "size": None, "use_cuda": use_cuda, "gdr_error": gdr_error,
            "error": error, "error_kind": None}


def measurement(rec: dict[str, Any]) -> FabricMeasure | None:
    """One perftest run of a `pairs` process -> a measurement (its figure parsed from stdout)."""
    test = rec.get("test")
    if not isinstance(test, str) or not isinstance(rec.get("round"), int) or not isinstance(rec.get("rail"), int):
        return None
    out = blank_measure(test, str(rec.get("hca") or ""), str(rec.get("peer") or ""), step=(rec["round"], rec["rail"]),
                        role=str(rec.get("role") or ""), peer_hca=_s(rec.get("peer_hca")), extra=bool(rec.get("extra")),
                        use_cuda=_i(rec.get("use_cuda")), gdr_error=_s(rec.get("gdr_error")), error=_s(rec.get("error")))
    kind = out["kind"]
    if out["error"] is not None:
        out["error_kind"] = "missing" if "not installed" in out["error"] else "not_run"
        return out
    stdout, stderr = str(rec.get("stdout") or ""), str(rec.get("stderr") or "")
    run = None
    left_out: list[str] = []
    if stdout.strip():
        log = parse_perftest(stdout, f"{test} round {rec['round']}")
        run = next((r for r in log.runs if r.kind == kind and r.rows), None)
        left_out = [n.text for n in log.notes if n.text.startswith("row left out")]
    result = run.result() if run is not None else None
    want, got = _i(rec.get("peer_lid")), (run.remote.get("lid") if run is not None else None)
    if result is not None and want is not None and isinstance(got, int) and got not in (0, want):
        # a client of another round reached this server (or this client another server): not this pair
        out["error"] = f"measured against LID {got:#x}, not the peer's LID {want:#x} (another pair's process)"
        out["error_kind"] = "wrong_peer"
        return out
    if run is not None and result is not None:
        fill_figures(out, run)
        return out
    if left_out:
        # a figure the parser refused (negative, not a number, past any port): the host printed an
        # impossible reading, which names it (verdict/fabric_word.py), not a failed tool
        out["error"], out["error_kind"] = one_line(left_out[0][:200]), "impossible"
    elif rec.get("timed_out"):
        out["error"], out["error_kind"] = ("the peer never connected before the step's deadline" if out["role"] == "server"
                                           else "no result before the step's deadline"), "timeout"
    else:
        last = (stderr.strip() or stdout.strip()).splitlines()
        out["error"] = (last[-1][:200] if last else f"exit status {rec.get('exit')}, no output")
        out["error_kind"] = _error_kind(stderr + "\n" + stdout) or "failed"
    return out


def nccl_transport(lines: list[Any]) -> tuple[str | None, bool | None]:
    """The network transport NCCL's channel lines name between hosts (the most used) and whether
    it moved data with GPUDirect RDMA; (None, None) when no line crossed hosts."""
    seen: dict[str, int] = {}
    gdr = 0
    total = 0
    for line in lines:
        if not isinstance(line, str):
            continue
        m = _NET_VIA.search(line)
        if m:
            key = f"NET/{m.group(2)}"
            seen[key] = seen.get(key, 0) + 1
            total += 1
            gdr += 1 if m.group(3) else 0
    if not seen:
        return None, None
    best = max(seen.items(), key=lambda kv: kv[1])[0]
    return (best + ("/GDRDMA" if gdr and gdr * 2 >= total else "")), gdr * 2 >= total


def _group(raw: dict[str, Any]) -> FabricNcclGroup | None:
    if not isinstance(raw.get("group"), str):
        return None
    data = _dict(raw.get("data"))
    results = [x for x in (nccl_result(r) for r in _list(data.get("results")) if isinstance(r, dict)) if x is not None]
    transport, gdr = nccl_transport(_list(data.get("debug_lines")))
    errs = [f"{e.get('where')}: {e.get('message')}" for e in _list(data.get("errors")) if isinstance(e, dict)]
    hang = _dict(data.get("hang"))
    if hang:
        errs.append(f"{hang.get('op')} of {hang.get('size_bytes')} bytes did not finish within {hang.get('after_s')} s")
    if raw.get("outcome") not in (None, "ok"):
        errs.insert(0, f"{raw.get('outcome')}: {raw.get('reason') or ''}".strip())
    wrong = [r["wrong"] for r in results if r["wrong"] is not None]
    comm = _dict(data.get("comm"))
    return {
        "group": raw["group"], "kind": str(raw.get("kind") or ""), "rail": _i(raw.get("rail")), "hca": _s(raw.get("hca")),
        "members": [str(m) for m in _list(raw.get("members"))], "ranks": _i(comm.get("nranks")),
        "transport": transport, "gdr": gdr, "busbw_gbps": largest_allreduce(results), "results": results,
        "wrong": sum(wrong) if wrong else None, "error": "; ".join(errs)[:500] or None,
    }


def _plan(raw: Any) -> FabricPlan | None:
    d = _dict(raw)
    if not d:
        return None
    return {"hosts": _i(d.get("hosts")) or 0, "rails": _i(d.get("rails")) or 0, "rounds": _i(d.get("rounds")) or 0,
            "extra_rounds": _i(d.get("extra_rounds")) or 0, "round_s": _f(d.get("round_s")) or 0.0,
            "budget_s": _f(d.get("budget_s")) or 0.0, "tests": [str(t) for t in _list(d.get("tests"))],
            "spec": _dict(d.get("spec"))}


# A planned step as the controller handed it (api/fabric.py stores them in the host's plan):
# (round, rail, role, peer, hca).  A result is taken only for one of these, each test once.
StepKey = tuple[int, int, str, str, str]
REFUSED_SHOWN = 8  # refused results named one by one; the rest counted


def planned_steps(plan: dict[str, Any]) -> set[StepKey] | None:
    """The steps the controller planned for this host; None for a run stored before plans said
    them (its results are then bounded by the plan's round count alone)."""
    raw = plan.get("steps")
    if not isinstance(raw, list):
        return None
    out: set[StepKey] = set()
    for s in raw:
        if isinstance(s, list) and len(s) == 5 and isinstance(s[0], int) and isinstance(s[1], int):
            out.add((s[0], s[1], str(s[2]), str(s[3]), str(s[4])))
    return out


def _step_of(rec: dict[str, Any]) -> tuple[int, int, str, str, str, str] | None:
    """(round, rail, role, peer, hca, test) of a result, read as `measurement` reads them; None
    for a record that is no result (a window that passed before its test could start)."""
    test, rnd, rail = rec.get("test"), rec.get("round"), rec.get("rail")
    if not isinstance(test, str) or not isinstance(rnd, int) or not isinstance(rail, int):
        return None
    return rnd, rail, str(rec.get("role") or ""), str(rec.get("peer") or ""), str(rec.get("hca") or ""), test


def _out_of_plan(key: tuple[int, int, str, str, str, str], steps: set[StepKey] | None, tests: list[str],
                 rounds: int | None) -> str | None:
    """Why a result is not one the plan asked this host for, None when it is."""
    rnd, rail, role, peer, hca, test = key
    # the host's own words, shown one line each and bounded: they are what it invented
    where = one_line(f"round {rnd} rail {rail} {test[:40]} as {role[:20] or '?'} with {peer[:80] or '?'}")
    if tests and test not in tests:
        return f"{where}: a test the plan did not ask for"
    if steps is not None and key[:5] not in steps:
        return f"{where} on {one_line(hca[:40]) or '?'}: not a step of the plan (round, rail, peer, role or HCA)"
    if steps is None and rounds is not None and not 0 <= rnd < rounds:
        return f"{where}: outside the plan's {rounds} round(s)"
    return None


def planned_results(results: list[dict[str, Any]], plan: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """The results the plan asked for, each (step, test) once, and one line per refused one: a
    host speaks only for its own planned steps, anything else would move the fleet's medians.
    Decided before any output is parsed, so a flood of invented results costs no parsing."""
    steps = planned_steps(plan)
    tests = [str(t) for t in _list(plan.get("tests"))]
    rounds = None
    if isinstance(plan.get("rounds"), int):
        rounds = plan["rounds"] + (plan.get("extra_rounds") if isinstance(plan.get("extra_rounds"), int) else 0)
    kept: list[dict[str, Any]] = []
    refused: list[str] = []
    seen: set[tuple[Any, ...]] = set()
    for rec in results:
        key = _step_of(rec)
        if key is None:
            continue
        why = _out_of_plan(key, steps, tests, rounds)
        if why is None and key in seen:
            why = one_line(f"round {key[0]} rail {key[1]} {key[5][:40]} with {key[3][:80]}: a second result for one test")
        if why is None:
            seen.add(key)
            kept.append(rec)
        else:
            refused.append(why)
    return kept, _counted(refused)


def _counted(lines: list[str]) -> list[str]:
    if len(lines) <= REFUSED_SHOWN:
        return lines
    return [*lines[:REFUSED_SHOWN], f"... and {len(lines) - REFUSED_SHOWN} more result(s) outside the plan"]


def _wave_results(data: dict[str, Any]) -> list[dict[str, Any]]:
    return [rec for wave in _list(data.get("waves")) if isinstance(wave, dict)
            for rec in _list(_dict(wave.get("data")).get("results")) if isinstance(rec, dict)]


def refused_answers(data: dict[str, Any]) -> list[str]:
    """What of a host's raw fabric data the plan refuses (the controller's own refusals, then its
    waves' results outside the plan), without parsing any output: the driver's outcome reads it."""
    own = [str(r)[:300] for r in _list(data.get("refused"))]
    return _counted(own + planned_results(_wave_results(data), _dict(data.get("plan")))[1])


def normalize(data: dict[str, Any]) -> FabricFacts:
    if not isinstance(data, dict):
        raise ValueError("fabric data must be a mapping")
    discover = _dict(data.get("discover"))
    plan = _dict(data.get("plan"))
    errors = [str(e)[:300] for e in _list(data.get("errors"))]
    tools: dict[str, Any] = dict(_dict(_dict(discover.get("perftest")).get("tools")))
    for wave in _list(data.get("waves")):
        if isinstance(wave, dict) and wave.get("outcome") not in (None, "ok"):
            errors.append(f"wave {wave.get('wave')}: {wave.get('outcome')}: {wave.get('reason') or ''}"[:300])
    kept, refused = planned_results(_wave_results(data), plan)
    measurements = [m for m in (measurement(rec) for rec in kept) if m is not None]
    refused = [str(r)[:300] for r in _list(data.get("refused"))] + refused
    groups = [g for g in (_group(x) for x in _list(data.get("nccl")) if isinstance(x, dict)) if g is not None]
    perftest = _dict(discover.get("perftest"))
    wanted = [str(t) for t in _list(plan.get("tests"))]
    return {
        "source": "probe",
        "skipped": _s(data.get("skipped")),
        "hcas": _hcas(discover, plan),
        "gpus": [
            {k: g.get(k) for k in ("bus_id", "ordinal", "numa_node", "dmabuf", "busy", "pcie")}
            for g in _list(discover.get("gpus")) if isinstance(g, dict)
        ],
        "gdr": gdr_expectation(discover),
        "perftest": {"tools": tools, "cuda": perftest.get("cuda") if isinstance(perftest.get("cuda"), bool) else None,
                     "dmabuf": perftest.get("dmabuf") if isinstance(perftest.get("dmabuf"), bool) else None,
                     "missing": [t for t in wanted if t not in tools]},
        "measurements": measurements,
        "nccl": groups,
        "plan": _plan(plan),
        "errors": errors,
        "refused": _counted(refused),
    }
