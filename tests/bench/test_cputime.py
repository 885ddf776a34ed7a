"""bench/cputime: /proc/<pid>/stat parsing, process trees, CPU seconds per component."""

from __future__ import annotations

from pathlib import Path

from bench import cputime
from bench.cputime import ProcStat


def _stat(pid: int, comm: str, ppid: int, pgid: int, ticks: tuple[int, int, int, int]) -> str:
    # proc(5): pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt
    # cmajflt utime stime cutime cstime priority ...
    utime, stime, cutime, cstime = ticks
    return (
        f"{pid} ({comm}) S {ppid} {pgid} {pgid} 0 -1 4194560 10 0 0 0 "
        f"{utime} {stime} {cutime} {cstime} 20 0 1 0 12345 1000 100\n"
    )


def _fake_proc(tmp_path: Path, lines: dict[int, str]) -> Path:
    for pid, line in lines.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(line)
    (tmp_path / "self").mkdir()  # not a PID: skipped
    return tmp_path


def test_a_stat_line_with_spaces_and_parentheses_in_its_name_parses() -> None:
    # given a command name holding ") (" as a process may
    line = _stat(42, "gunicorn: worker (a) [x]", 7, 7, (100, 20, 3, 4))
    # when it is parsed
    stat = cputime.parse_stat(42, line)
    # then the fields after the name are found, CPU being all four counters
    assert stat == ProcStat(pid=42, ppid=7, pgid=7, cpu_ticks=127)


def test_members_are_descendants_by_parent_and_the_process_group() -> None:
    # given a tree 10 -> 11 -> 12, an orphan 13 of group 10 under init, a stranger 20
    stats = {
        1: ProcStat(1, 0, 1, 0),
        10: ProcStat(10, 1, 10, 0),
        11: ProcStat(11, 10, 10, 0),
        12: ProcStat(12, 11, 12, 0),  # started its own group: still a descendant
        13: ProcStat(13, 1, 10, 0),
        20: ProcStat(20, 1, 20, 0),
    }
    # when the members of component 10 are collected
    # then they are its descendants and its group, not init nor the stranger
    assert cputime.members(10, stats) == {10, 11, 12, 13}


def test_members_of_a_dead_leader_are_what_is_left_of_its_group() -> None:
    stats = {1: ProcStat(1, 0, 1, 0), 31: ProcStat(31, 1, 30, 0)}
    assert cputime.members(30, stats) == {31}


def test_cpu_seconds_sum_each_tree_once(tmp_path: Path) -> None:
    # given two components, the second's root a child of the first's (a shared process)
    proc = _fake_proc(
        tmp_path,
        {
            10: _stat(10, "gunicorn", 1, 10, (50, 50, 0, 0)),
            11: _stat(11, "gunicorn", 10, 10, (150, 50, 0, 0)),
            20: _stat(20, "java", 11, 20, (100, 0, 0, 0)),
        },
    )
    # when their CPU is read (ticks at 100 per second)
    seconds = cputime.cpu_seconds({"a": 10, "b": 20}, proc=proc)
    # then the shared process counts for the first only
    ticks = cputime.TICKS_PER_S
    assert seconds == {"a": 400 / ticks, "b": 0.0}


def test_delta_is_never_negative_and_total_skips_missing_names() -> None:
    before = {"a": 1.0, "b": 5.0}
    after = {"a": 1.5, "b": 4.0, "c": 2.0}
    assert cputime.delta(before, after) == {"a": 0.5, "b": 0.0, "c": 2.0}
    assert cputime.total(after, ("a", "c", "zz")) == 3.5
