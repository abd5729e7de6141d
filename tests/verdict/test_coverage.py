"""verdict/coverage.py: pass / raised / not judged per host and finding id, from what each check
declares it needs (each rule's `needs`, verdict/rules/<prefix>.py)."""

from __future__ import annotations

from orchestrator.verdict import checks, rules
from orchestrator.verdict.coverage import NOT_JUDGED, PASS, RAISED, check_states, not_judged
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.findings import fault
from orchestrator.verdict.result import FleetResult, JudgedHost


def test_every_rule_declares_what_its_check_needs_and_every_held_back_rule_gets_its_function() -> None:
    assert set(checks.NEEDS) == set(checks.FINDING_IDS)
    for fid in checks.FINDING_IDS:
        rule = rules.BY_ID[fid]
        assert checks.NEEDS[fid].sections == rule.needs.sections, fid
        # a rule held back by its facts gets its check's function; no function for another rule
        assert (checks.NEEDS[fid].unjudged is not None) == rule.held_back, fid
    assert set(checks.HELD_BACK) == {r.id for r in rules.ALL if r.held_back}


def _probes(**outcomes: str) -> dict[str, dict[str, object]]:
    return {p: {"outcome": o, "reason": "" if o == "ok" else f"why {p}", "duration_s": 0.0} for p, o in outcomes.items()}


def test_not_judged_names_the_missing_probe_expectation_or_gpus() -> None:
    probes = _probes(host="ok", pcie="ok", nvml="unsupported")
    outcomes = {p: str(r["outcome"]) for p, r in probes.items()}
    facts = {"host": {}, "pcie": {"gpus": []}}
    why = not_judged(facts, outcomes, probes, Expectations(gpu_count=8))
    assert why["p2p.bandwidth.low"] == "p2p probe not in this run"
    assert why["gpu.lost"] == "nvml unsupported: why nvml"
    assert why["gpu.count.pci_vs_driver"] == "no GPUs on this host"
    assert why["host.board.mismatch"] == "no expectation board_vendor or board_model set"
    assert "gpu.count.mismatch" not in why  # the PCI bus counted, against the expectation
    assert "host.virtualized" not in why and "pcie.link.downgraded" not in why


def test_an_expectation_stored_but_unusable_is_not_called_unset() -> None:
    probes = _probes(host="ok", pcie="ok")
    outcomes = {p: "ok" for p in probes}
    facts = {"host": {}, "pcie": {"gpus": []}}
    why = not_judged(facts, outcomes, probes, Expectations(), unusable_expect=("board_model", "nic_count_min"))
    assert why["host.board.mismatch"] == ("its stored expectation board_model cannot be used here: correct "
                                          "probe_expect in its _host.json under raw/ and rejudge")
    assert why["gpu.count.mismatch"] == "no expectation gpu_count set"  # not among the unusable
    assert not_judged(facts, outcomes, probes, Expectations(board_model="X"),
                      unusable_expect=("board_model",)).get("host.board.mismatch") is None  # set elsewhere: judged


def test_unreachable_host_judges_nothing_and_a_raised_finding_wins() -> None:
    probes = _probes(host="unreachable", pcie="unreachable")
    why = not_judged({}, {p: "unreachable" for p in probes}, probes, None, "unreachable", "connection refused")
    assert set(why) == set(checks.FINDING_IDS)
    assert set(why.values()) == {"host unreachable: connection refused"}
    stored = {"gpu.lost": "partial", "p2p.outlier": "p2p probe not in this run"}
    lost = fault("gpu.lost", "h", "GPU0", "lost")
    states = check_states(stored, [lost], ["gpu.lost", "p2p.outlier", "gpu.mig.enabled"],
                          silenced=[("gpu.mig.enabled", "known")])
    assert states["gpu.lost"].state == RAISED
    assert states["p2p.outlier"].state == NOT_JUDGED
    assert states["gpu.mig.enabled"].state == NOT_JUDGED and "silenced" in states["gpu.mig.enabled"].reason


def test_records_without_stored_states_are_worked_out_from_probes() -> None:
    rec = {"name": "h", "outcome": "ok", "reason": "", "probes": _probes(host="ok", nvml="ok"),
           "facts": {"host": {}, "gpus": {"list": [{"index": 0}]}}}
    host = JudgedHost.from_record(rec)
    states = check_states(host.not_judged, [], ["gpu.lost", "p2p.outlier"])
    assert states["gpu.lost"].state == PASS
    assert states["p2p.outlier"].reason == "p2p probe not in this run"


def test_a_stored_fleet_read_by_its_index_gives_the_states_of_the_records(tmp_path) -> None:
    """FleetResult.check_states reads stored records without their facts; a record stored before
    its not-judged ids were is read whole, so what its facts measured still counts."""
    from orchestrator.store.fleet_file import read_fleet, write_fleet
    from orchestrator.store.spool import SpooledRecords

    facts = {"host": {}, "gpus": {"list": [{"index": 0}]}}
    stored = {"name": "new", "outcome": "ok", "reason": "", "probes": _probes(host="ok", nvml="ok"), "facts": facts,
              "not_judged": {"gpu.lost": "partial"}}
    older = {"name": "old", "outcome": "ok", "reason": "", "probes": _probes(host="ok", nvml="ok"), "facts": facts}
    write_fleet(tmp_path / "fleet.json", {"run": {}, "summary": {}, "hosts": [stored, older], "findings": []})
    fleet = read_fleet(tmp_path / "fleet.json")
    assert isinstance(fleet["hosts"], SpooledRecords)
    states = {h.name: st for h, st in FleetResult.from_document(fleet).check_states(["gpu.lost", "gpu.mig.enabled"])}
    assert states["new"]["gpu.lost"] == check_states(stored["not_judged"], [], ["gpu.lost"])["gpu.lost"]
    assert states["new"]["gpu.lost"].state == NOT_JUDGED
    # judged from its facts: the GPU list was measured, so gpu.lost passed (stripped facts would say
    # "no gpus facts from the nvml probe")
    assert states["old"]["gpu.lost"].state == PASS and states["old"]["gpu.mig.enabled"].state == PASS


def test_two_stored_records_of_one_name_keep_their_own_states(tmp_path) -> None:
    """A damaged or hand-joined fleet.json may name a host twice: each record is judged as itself."""
    from orchestrator.store.fleet_file import read_fleet, write_fleet

    with_gpus = {"name": "h", "outcome": "ok", "reason": "", "probes": _probes(host="ok", nvml="ok"),
                 "facts": {"host": {}, "gpus": {"list": [{"index": 0}]}}}
    without = {"name": "h", "outcome": "ok", "reason": "", "probes": _probes(host="ok", nvml="unsupported"),
               "facts": {"host": {}}}
    write_fleet(tmp_path / "fleet.json", {"run": {}, "summary": {}, "hosts": [with_gpus, without], "findings": []})
    stored = FleetResult.from_document(read_fleet(tmp_path / "fleet.json"))
    first, second = (st["gpu.lost"] for _, st in stored.check_states(["gpu.lost"]))
    assert first.state == PASS and second.state == NOT_JUDGED


def test_a_finding_silenced_on_one_host_is_not_judged_there_only(demo_inputs: list) -> None:
    """The playbook silences an id on one host: that host's state says so; another host with the
    same finding still has it raised, and a host without it passed (one index of the silenced
    findings by host, not every silenced finding read again for each host)."""
    from orchestrator.verdict.judge import build_fleet
    from orchestrator.verdict.overrides import Override
    from tests.support.demo_inputs import copies
    from tests.support.judged import meta

    hosts = copies([h for h in demo_inputs if h.name == "dgx-h100-01"], 3)
    quiet, loud, fine = (h.name for h in hosts)
    expect = {quiet: Expectations(gpu_count=16), loud: Expectations(gpu_count=16), fine: Expectations(gpu_count=8)}
    fid = "gpu.count.mismatch"
    fleet = build_fleet(meta(), hosts, lambda h: expect[h.name],
                        lambda name: {fid: Override("off", "known short")} if name == quiet else {})
    assert [(s.finding.host, s.finding.id) for s in fleet.silenced] == [(quiet, fid)]
    states = {h.name: st[fid] for h, st in fleet.check_states([fid])}
    assert states[quiet].state == NOT_JUDGED and states[quiet].reason == "silenced by the playbook: known short"
    assert states[loud].state == RAISED and states[fine].state == PASS
