"""`nsq-trace analyze` shows how far its judging is (spark_analysis/judge/progress.py): each judging task writes how
many of its server's rows it has fed to its judge, of how many, and the driver prints them while the job runs and
once at its end."""

from __future__ import annotations

import re
import time

from test_monitoring import Exchange

from spark_analysis.analysis import run_analysis
from spark_analysis.judge import monitoring, progress
from spark_analysis.judge.progress import TaskProgress, progress_line, progress_shown
from spark_analysis.read.storage import Storage

LINE = re.compile(progress.LINE_START + r"([\d,]+) of ([\d,]+) rows \((\d+) %\) of (\d+) server\(s\)")


def _numbers(line: str) -> tuple[int, int, int, int]:
    fed, total, percent, servers = LINE.fullmatch(line).groups()
    return int(fed.replace(",", "")), int(total.replace(",", "")), int(percent), int(servers)


def test_a_server_is_as_far_as_its_slowest_share():
    reports = [{"server": "a 4150", "fed": 900, "total": 1000}, {"server": "a 4150", "fed": 300, "total": 1000},
               {"server": "b 4150", "fed": 50, "total": 200}]
    assert progress_line(reports) == "judging: 350 of 1,200 rows (29 %) of 2 server(s)"
    assert progress_line([{"server": "a 4150", "fed": 0, "total": 1000}]) is None  # nothing fed yet: no line
    assert progress_line([]) is None


def test_a_file_replaced_while_read_is_read_the_next_time(tmp_path):
    shown = []
    with progress_shown(str(tmp_path), shown.append):
        TaskProgress(str(tmp_path / progress.PROGRESS / "a.json"), "a 4150", 10).write()
        (tmp_path / progress.PROGRESS / "b.json").write_text('{"server": "b 4150", "fe')  # mid-write
        (tmp_path / progress.PROGRESS / "c.json.part").write_text("{}")  # replace_text's new version, not yet moved
        reports = list(progress._reports(str(tmp_path / progress.PROGRESS), progress.LOCAL))
    assert reports == [{"server": "a 4150", "fed": 0, "total": 10}]
    assert shown == []  # shorter than SHOWN_EVERY_S


class Unanswering(Storage):
    def files(self, directory: str, suffix: str = "") -> list[str]:
        raise OSError("the store did not answer")

    def replace_text(self, url: str, text: str) -> None:
        raise OSError("the store did not answer")


def test_a_store_that_does_not_answer_is_read_and_written_the_next_time(tmp_path, monkeypatch):
    assert list(progress._reports(str(tmp_path), Unanswering())) == []
    monkeypatch.setattr(progress, "WRITTEN_EVERY_S", 0.0)
    task = TaskProgress(str(tmp_path / "a.json"), "a 4150", 10, Unanswering())
    task.add(3)  # the judging goes on
    assert task.fed == 3


def test_a_task_writes_as_it_feeds_and_the_driver_shows_it(tmp_path, monkeypatch):
    monkeypatch.setattr(progress, "SHOWN_EVERY_S", 0.01)
    monkeypatch.setattr(progress, "WRITTEN_EVERY_S", 0.0)
    shown, ended = [], []
    with progress_shown(str(tmp_path), lambda line: shown.append((bool(ended), _numbers(line)))):
        task = progress.task_progress(str(tmp_path), "observed-x-0", "a 4150", [], progress.LOCAL)
        task.total = 5  # as if its files held 5 rows
        for _ in range(5):
            task.add(1)
            deadline = time.monotonic() + 10
            while not shown or shown[-1][1][0] < task.fed:  # until the driver's thread has read it
                assert time.monotonic() < deadline, shown
                time.sleep(0.005)
        ended.append(True)
    feds = [numbers[0] for _, numbers in shown]
    assert sorted(set(feds)) == [1, 2, 3, 4, 5] and feds == sorted(feds)
    assert shown[-1] == (True, (5, 5, 100, 1))  # once more when the judging has ended


def test_analyze_shows_how_far_its_judging_is(spark, tmp_path, monkeypatch):
    """The judging tasks' files count every row the judge takes (as the judge without Spark takes them), and the
    driver's last line has all of them: a capture judged in less time than a task waits between its writes."""
    monkeypatch.setattr(progress, "SHOWN_EVERY_S", 0.05)  # in the driver
    capture = tmp_path / "a.pcap"
    Exchange(capture).subscribed().message(10, 1).heartbeats(3000).message(1600, 1).end(3000)
    rows_taken = []

    def counting(by_server, http, rows_of, *args, **kwargs):
        rows_taken.extend(rows_of(server).num_rows for server in by_server)
        return {}

    monkeypatch.setattr(monitoring, "judge_servers", counting)
    monitoring.judge_capture(capture, frozenset({4150}))
    steps = []
    run_analysis(spark, [str(capture)], str(tmp_path / "out"), report=False, step=steps.append)
    lines = [_numbers(line) for line in steps if line.startswith(progress.LINE_START)]
    assert lines, steps
    assert lines[-1] == (sum(rows_taken), sum(rows_taken), 100, 1) and sum(rows_taken) > 0
    assert all(fed <= total == sum(rows_taken) for fed, total, _, _ in lines)
    assert [fed for fed, _, _, _ in lines] == sorted(fed for fed, _, _, _ in lines)
