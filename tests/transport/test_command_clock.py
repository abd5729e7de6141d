"""CommandClock: when a command is given up, phase by phase (transport/base.py).

Plain: the timeout counts from the session request.  On the host's clock (the runner's probe
scripts): reaching the host gets the connection's share, the script's start one probe timeout, and
the probe's timeout counts from its first stdout bytes, so time lost before them on a slow link or
a busy controller is never the probe's."""

from __future__ import annotations

from orchestrator.transport.base import CommandClock


def test_plain_the_timeout_counts_from_the_start() -> None:
    c = CommandClock(100.0, 60.0)
    c.reached(105.0)
    c.output(110.0)
    assert c.end == 160.0


def test_plain_with_first_output_the_first_byte_must_come_early_then_the_whole_timeout_holds() -> None:
    c = CommandClock(100.0, 60.0, first_output=4.0)
    assert c.end == 104.0
    c.reached(101.0)  # nothing moves: the plain clock does not care when the host accepted
    assert c.end == 104.0
    c.output(103.0)
    assert c.end == 160.0


def test_on_the_hosts_clock_each_phase_has_its_own_budget() -> None:
    c = CommandClock(100.0, 60.0, first_output=60.0, on_host=True, reach=10.0)
    assert c.end == 110.0  # session + exec: the link's share
    c.reached(108.0)  # a slow link took 8 s to get the command accepted
    assert c.end == 168.0  # the script must start within one probe timeout of that
    c.output(130.0)  # the probe announced its start 22 s later (a busy controller fed it slowly)
    assert c.end == 190.0  # its own 60 s count from there, as its watchdog's do on the host
    c.output(150.0)  # later output moves nothing
    assert c.end == 190.0


def test_a_script_that_never_starts_is_given_up_after_first_output() -> None:
    c = CommandClock(100.0, 60.0, first_output=4.0, on_host=True, reach=10.0)
    c.reached(100.5)
    assert c.end == 104.5


def test_the_hosts_deadline_caps_every_phase() -> None:
    c = CommandClock(100.0, 60.0, first_output=60.0, on_host=True, reach=10.0, hard=150.0)
    c.reached(101.0)
    c.output(102.0)
    assert c.end == 150.0
    assert c.left(149.0) == 1.0
