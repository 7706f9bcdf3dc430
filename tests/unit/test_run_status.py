"""Issue 35 item 5: a killed SuperLink is recorded as what it was, not as Ctrl-C (the
reason's wording; the two-process test is tests/integration/test_run_status_superlink.py)."""

from __future__ import annotations

import signal

from fedtext.records import signal_reason


def test_signal_reason_names_a_dead_parent_and_otherwise_the_signal():
    assert signal_reason(signal.SIGINT, 4242, 4242) == "terminated by SIGINT"
    assert signal_reason(signal.SIGTERM, 4242, 4242) == "terminated by SIGTERM"
    assert signal_reason(signal.SIGINT, 4242, 1) == (
        "the SuperLink went away: the process that started the ServerApp (pid 4242) had stopped (SIGINT)")
    assert signal_reason(signal.SIGINT, 1, 7) == "terminated by SIGINT"  # started by init: no SuperLink to blame
