"""torchrun's stderr as the launcher reads it (dcpctl.launch.runner.StderrLog): pure, no processes."""
from dcpctl.launch.runner import StderrLog

ROOT_CAUSE = """\
Root Cause (first observed failure):
[0]:
  time      : 2026-01-01_00:00:00
  host      : box
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 123)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 123"""


def feed(log: StderrLog, text: str) -> list:
    return [log.feed(line) for line in text.splitlines()]


def test_progress_lines_come_back_and_are_not_kept():
    log = StderrLog(debug=False)
    assert feed(log, "dcpctl-progress load 3/7\nsomething else") == [("load", 3, 7), None]
    assert log.other == ["something else"]


def test_root_cause_names_the_dead_rank():
    log = StderrLog(debug=False)
    feed(log, ROOT_CAUSE)
    assert log.failure(1) == "rank 1 died: Signal 9 (SIGKILL) received by PID 123"


def test_a_rank_error_wins_over_its_own_root_cause():
    log = StderrLog(debug=False)
    feed(log, "[rank 1] ValueError: bad\n[rank 0] RuntimeError: peer gone\n" + ROOT_CAUSE)
    assert log.failure(1) == "[rank 1] ValueError: bad (and 1 more rank error(s))"


def test_no_rank_error_shows_the_last_lines():
    log = StderrLog(debug=False)
    feed(log, "\n".join(f"line {i}" for i in range(30)))
    assert len(log.other) == 20
    assert log.failure(3) == "torchrun exited with status 3: line 27 | line 28 | line 29"


def test_runtime_notes_are_shown_once_whatever_the_ranks(capsys):
    log = StderrLog(debug=False)
    text = "local attention: the Triton MLA kernel (why)"
    assert feed(log, f"dcpctl-note {text}\ndcpctl-note {text}\ndcpctl-note other") == [None, None, None]
    assert log.notes == [text, "other"] and log.other == []
    err = capsys.readouterr().err
    assert err.count(f"dcpctl: {text}") == 1 and "dcpctl: other" in err
