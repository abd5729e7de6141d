"""Playbook loading, validation (line-numbered errors) and finding overrides."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from orchestrator.api.playbook import (
    DEFAULT_PLAYBOOK,
    MAX_PLAYBOOK,
    PlaybookError,
    find_playbook,
    load_playbook,
    parse_playbook,
    shipped_playbooks,
)
from orchestrator.engine.payload import catalog
from orchestrator.verdict.expectations import Expectations
from orchestrator.verdict.findings import Kind, Severity, fault, limitation
from orchestrator.verdict.overrides import Override, apply_overrides

# The product's five probes and whether each is passive (PRODUCT.md §1: only p2p loads the GPUs).
# Tests of the validator use this fixed catalog so they do not depend on which probe files exist yet.
CATALOG = {"host": True, "pcie": True, "nvml": True, "nvlink": True, "p2p": False, "nccl": False,
           "kmsg": True, "nic": True}


def parse(text: str):
    return parse_playbook(textwrap.dedent(text), "pb.yml", CATALOG)


def error_of(text: str) -> str:
    with pytest.raises(PlaybookError) as e:
        parse(text)
    return str(e.value)


def test_full_play_loads_with_every_field():
    pb = parse("""\
        - name: strict
          hosts: ["h100", "!gpu07"]
          become: true
          forks: 8
          passive_only: false
          probes:
            - host
            - {name: p2p, args: {size_mb: 64}, timeout: 120}
          expect: {gpu_count: 8, mig: false, gpu_nic_level: pix}
          findings:
            sensor.fan.zero_while_hot: {severity: warn, reason: liquid cooled}
            pcie.*: {severity: off, reason: "vendor board, known"}
        """)
    (play,) = pb.plays
    assert play.name == "strict"
    assert play.hosts == "h100:!gpu07"
    assert play.become is True and play.forks == 8
    assert play.probe_names == ["host", "p2p"]
    assert play.probes[1].args == {"size_mb": 64} and play.probes[1].timeout == 120.0
    assert play.expect == Expectations(gpu_count=8, mig=False, gpu_nic_level="PIX")
    assert play.findings["sensor.fan.zero_while_hot"] == Override("warn", "liquid cooled")
    # a bare YAML `off` is the boolean false; it still means "silence"
    assert play.findings["pcie.*"] == Override("off", "vendor board, known")
    assert play.line == 1


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        ("- name: a\n  probes: [host]\n  forkz: 3\n", 3, "unknown key 'forkz'; did you mean 'forks'?"),
        ("- name: a\n  probes: [host]\n  forks: many\n", 3, "forks must be a positive integer, got 'many'"),
        ("- name: a\n  probes: [host]\n  forks: yes\n", 3, "forks must be a positive integer, got True"),
        ("- name: a\n  probes: [host]\n  forks: 0\n", 3, "positive integer, got 0"),
        ("- name: a\n  become: 1\n  probes: [host]\n", 2, "become must be true or false"),
        ("- name: a\n  probes:\n    - host\n    - nvlnk\n", 4, "unknown probe 'nvlnk'; did you mean 'nvlink'?"),
        ("- name: a\n  probes:\n    - {name: p2p, timeot: 3}\n", 3, "unknown key 'timeot'; did you mean 'timeout'?"),
        ("- name: a\n  probes:\n    - {name: p2p, timeout: -1}\n", 3, "timeout must be > 0"),
        ("- name: a\n  probes:\n    - {args: {}}\n", 3, "has no 'name'"),
        ("- name: a\n  probes: [host, host]\n", 2, "probe 'host' listed twice"),
        ("- name: a\n  probes: []\n", 2, "non-empty list"),
        ("- name: a\n  hosts: gpu\n", 1, "has no 'probes' list"),
        ("- name: a\n  probes: [host]\n  expect:\n    gpu_cnt: 8\n", 4, "unknown expectation key(s) gpu_cnt"),
        ("- name: a\n  probes: [host]\n  expect: {gpu_count: eight}\n", 3, "'eight' is not a valid int"),
        ("- name: a\n  passive_only: true\n  probes: [host, p2p]\n", 3, "probe 'p2p' is not passive"),
        ("- name: a\n  probes: [host]\n  findings:\n    x.y: {severity: warn}\n", 4, "x.y needs a reason"),
        ("- name: a\n  probes: [host]\n  findings:\n    x.y:\n      severity: loud\n      reason: r\n", 5,
         "severity must be one of fail, warn, info, off"),
        ("- name: a\n  probes: [host]\n  findings:\n    x.y: {severity: warn, reson: r}\n", 4, "did you mean 'reason'?"),
        ("- name: a\n  probes: [host]\n  name: b\n", 3, "key 'name' given twice (first on line 1)"),
        ("- name: a\n  hosts: 3\n  probes: [host]\n", 2, "hosts must be a host pattern"),
        ("name: a\nprobes: [host]\n", 1, "a playbook is a list of plays"),
        ("- name: a\n  probes: [host\n", 3, "not valid YAML"),
        ("- name: a\n  probes: [host]\n- just a string\n", 3, "play 2 must be a mapping"),
        ("[]\n", 1, "the playbook has no plays"),
    ],
)
def test_invalid_playbooks_name_the_line_and_the_problem(text, line, needle):
    msg = error_of(text)
    assert msg.startswith(f"pb.yml:{line}: "), msg
    assert needle in msg, msg


def test_empty_file_is_an_error(tmp_path: Path):
    p = tmp_path / "empty.yml"
    p.write_text("# nothing here\n")
    with pytest.raises(PlaybookError, match="the playbook is empty"):
        load_playbook(p, CATALOG)


def test_missing_file_is_one_clear_error(tmp_path: Path):
    with pytest.raises(PlaybookError, match="cannot read playbook"):
        load_playbook(tmp_path / "nope.yml", CATALOG)


def test_unsafe_yaml_tags_are_refused():
    msg = error_of("- name: !!python/object/apply:os.system ['true']\n  probes: [host]\n")
    assert msg.startswith("pb.yml:1: ")


def test_shipped_playbooks_are_listed_with_descriptions():
    shipped = {name: (path, desc) for name, path, desc in shipped_playbooks()}
    assert {"audit", "premigration", "quick"} <= set(shipped)
    assert all(desc for _, desc in shipped.values())
    assert find_playbook(None) == shipped[DEFAULT_PLAYBOOK][0]
    assert find_playbook("quick") == shipped["quick"][0]
    with pytest.raises(PlaybookError, match="did you mean 'audit'"):
        find_playbook("audti")


def test_shipped_playbooks_content():
    pbs = {name: load_playbook(path, CATALOG) for name, path, _ in shipped_playbooks()}
    audit = pbs["audit"].plays[0]
    assert audit.probe_names == ["host", "pcie", "nvml", "nvlink", "kmsg", "nic"]
    assert audit.passive_only and not audit.become
    pre = pbs["premigration"].plays[0]
    assert set(pre.probe_names) == set(CATALOG)
    assert pre.expect.mig is False and pre.expect.virtualization == "none" and pre.expect.nvlink_all_up is True
    assert pbs["quick"].plays[0].probe_names == ["host", "nvml"]


def test_shipped_playbooks_load_against_the_real_probe_catalog():
    real = {name: spec.passive for name, spec in catalog().items()}
    missing = sorted(set(CATALOG) - set(real))
    if missing:
        pytest.skip(f"probe files not in this checkout yet: {', '.join(missing)}")
    for _, path, _ in shipped_playbooks():
        assert load_playbook(path).plays


def _findings():
    return [
        fault("pcie.link.downgraded", "gpu01", "0000:18:00.0", "x8 of x16"),
        fault("sensor.fan.zero_rpm", "gpu01", "GPU0", "0 RPM at 58 C", severity=Severity.WARN),
        limitation("nvlink.absent.mig", "gpu01", "GPU1", "MIG on"),
        fault("sensor.temp.high", "gpu01", "GPU2", "91 C"),
    ]


def test_apply_overrides_changes_severity_and_silences_with_reason():
    before = _findings()
    overrides = {
        "pcie.link.downgraded": Override("warn", "riser known"),
        "sensor.*": Override("off", "no fans on this chassis"),
        "sensor.temp.high": Override("fail", "same as before"),
        "nvlink.absent.mig": Override("info", "unchanged"),
    }
    res = apply_overrides(before, overrides)
    by_id = {f.id: f for f in res.findings}
    assert set(by_id) == {"pcie.link.downgraded", "sensor.temp.high", "nvlink.absent.mig"}
    assert by_id["pcie.link.downgraded"].severity is Severity.WARN
    assert by_id["pcie.link.downgraded"].kind is Kind.FAULT
    assert "by playbook: riser known" in by_id["pcie.link.downgraded"].evidence[-1]
    # exact id beats the glob; same severity leaves the finding untouched
    assert by_id["sensor.temp.high"] == before[3]
    assert by_id["nvlink.absent.mig"] == before[2]
    assert [(s.finding.id, s.reason) for s in res.silenced] == [("sensor.fan.zero_rpm", "no fans on this chassis")]
    # pure: the inputs are not changed
    assert before[0].severity is Severity.FAIL and before[0].evidence == []


def test_no_overrides_keeps_everything():
    res = apply_overrides(_findings(), {})
    assert res.findings == _findings() and res.silenced == []


@pytest.mark.parametrize(
    ("text", "line", "needle"),
    [
        # a typo of a registered id: named with its line and the id it most likely meant
        ("- name: a\n  probes: [host]\n  findings:\n    pcie.link.downgarded: {severity: warn, reason: r}\n", 4,
         "'pcie.link.downgarded' is not a finding id; did you mean 'pcie.link.downgraded'?"),
        # the id the docs example used to show, which no check raises
        ("- name: a\n  probes: [host]\n  findings:\n    x: {severity: info, reason: r}\n"
         "    sensor.fan.zero_rpm: {severity: info, reason: r}\n", 5,
         "'sensor.fan.zero_rpm' is not a finding id; did you mean 'sensor.fan.zero_while_hot'?"),
        # a glob must match at least one registered id
        ("- name: a\n  probes: [host]\n  findings:\n    pcei.*: {severity: off, reason: r}\n", 4,
         "'pcei.*' matches no finding id"),
    ],
)
def test_override_ids_must_be_registered(text, line, needle):
    with pytest.raises(PlaybookError) as e:
        parse_playbook(text, "pb.yml", CATALOG, finding_ids=("pcie.link.downgraded", "pcie.acs.enabled",
                                                             "sensor.fan.zero_while_hot", "x"))
    msg = str(e.value)
    assert msg.startswith(f"pb.yml:{line}: "), msg
    assert needle in msg, msg


def test_override_ids_are_checked_against_the_registry_by_default():
    from orchestrator.verdict.checks import FINDING_IDS

    ok = parse("- name: a\n  probes: [host]\n  findings:\n    sensor.*: {severity: off, reason: r}\n"
               "    nvlink.link.down: {severity: warn, reason: r}\n")
    assert set(ok.plays[0].findings) == {"sensor.*", "nvlink.link.down"}
    assert "nvlink.link.down" in FINDING_IDS
    msg = error_of("- name: a\n  probes: [host]\n  findings:\n    nvlink.link.dwn: {severity: warn, reason: r}\n")
    assert msg.startswith("pb.yml:4: ") and "did you mean 'nvlink.link.down'?" in msg



def test_a_playbook_path_that_is_no_file_or_too_big_is_one_error_and_never_read(tmp_path: Path) -> None:
    """`-p`, a stored run's plan and a bundle document's plan name a path: a FIFO would block the
    read for ever, a directory is no file, a path to gigabytes would be held in memory."""
    fifo = tmp_path / "plan.yml"
    os.mkfifo(fifo)
    with pytest.raises(PlaybookError, match="not a regular file"):
        find_playbook(str(fifo))
    with pytest.raises(PlaybookError, match="a directory, not a playbook file"):
        find_playbook(str(tmp_path))
    huge = tmp_path / "huge.yml"
    with open(huge, "wb") as f:
        f.truncate(MAX_PLAYBOOK + 1)
    with pytest.raises(PlaybookError, match=f"over the {MAX_PLAYBOOK:,} a playbook may have"):
        load_playbook(find_playbook(str(huge)))
    binary = tmp_path / "binary.yml"
    binary.write_bytes(b"- name: x\n  hosts: all\n\xff\n")
    with pytest.raises(PlaybookError, match="byte 23 is not UTF-8 text"):
        load_playbook(binary)
    with pytest.raises(PlaybookError, match="cannot read playbook: no such playbook"):
        load_playbook(tmp_path / "gone.yml")
