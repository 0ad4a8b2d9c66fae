"""The log-tail parser on real log text (see tests/fixtures/README.md): the slime#1487 report's last
lines, a real Ray 2.60 job driver log (2x H200 run), a real torch rank log with c10d's glog error line,
and named transformations of them (forwarded into a driver log by Ray, cut, redrawn by tqdm)."""

from __future__ import annotations

import calendar
import json
import time
from pathlib import Path

import pytest

from slime_hangdoctor.analysis.parts.logs import TIMER_STAGES
from slime_hangdoctor.errors import ParseError
from slime_hangdoctor.parsers.logs import LogKind, parse_log_tail
from slime_hangdoctor.verdict import Stage
from tests.fixtures.transforms import forwarded_by_ray, ray_job_logs_cli_to_body, truncate_at

FIX = Path(__file__).resolve().parents[1] / "fixtures"
SLIME_1487 = (FIX / "real" / "slime-1487" / "log_tail.txt").read_text()
DRIVER_LOG = ray_job_logs_cli_to_body(
    (FIX / "real" / "gpu-2xh200-ray-nccl-hang" / "hang" / "job_logs.txt").read_text()
)
RANK_LOG = (FIX / "render" / "run3_hang.1.log").read_text()


def _epoch(text: str) -> float:
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%d %H:%M:%S")))


def test_slime_1487_tail_ends_in_an_open_actor_train_timer() -> None:
    tail = parse_log_tail(SLIME_1487)
    assert [t.name for t in tail.open_timers] == ["actor_train"]
    assert tail.open_timers[0].started == _epoch("2026-01-23 17:02:54")
    assert tail.last_time == _epoch("2026-01-23 17:02:54")
    assert TIMER_STAGES[tail.open_timers[0].name] is Stage.TRAIN
    assert tail.lines == 3 and not tail.notable


def test_the_same_lines_forwarded_into_the_driver_log_by_ray() -> None:
    tail = parse_log_tail(forwarded_by_ray(SLIME_1487, "MegatronTrainRayActor", 3446, "192.0.2.2"))
    assert [t.name for t in tail.open_timers] == ["actor_train"]
    assert tail.last_time == _epoch("2026-01-23 17:02:54")
    assert tail.last_line.startswith("(MegatronTrainRayActor pid=3446, ip=192.0.2.2) [2026-01-23")


def test_an_end_line_closes_its_timer_per_process() -> None:
    end = "[2026-01-23 17:05:00] Timer actor_train end (elapsed: 126.0s)"
    assert not parse_log_tail(SLIME_1487 + end + "\n").open_timers
    other = forwarded_by_ray(end, "MegatronTrainRayActor", 9999)
    mine = forwarded_by_ray(SLIME_1487, "MegatronTrainRayActor", 3446)
    assert [t.name for t in parse_log_tail(mine + "\n" + other).open_timers] == ["actor_train"]


def test_real_ray_driver_log_gives_its_last_time_and_no_false_alarms() -> None:
    tail = parse_log_tail(DRIVER_LOG)
    assert tail.lines == 6
    assert tail.last_time == _epoch("2026-11-29 22:55:24")  # the last line with a time
    assert tail.last_line == "actors [(3445, [0]), (3446, [1])]"
    assert not tail.notable and not tail.open_timers


def test_times_are_read_with_the_collectors_offset() -> None:
    utc = parse_log_tail(DRIVER_LOG).last_time
    cet = parse_log_tail(DRIVER_LOG, utc_offset_s=3600).last_time
    assert utc is not None and cet is not None and utc - cet == 3600


def test_torch_c10d_glog_error_line_is_an_error() -> None:
    tail = parse_log_tail(RANK_LOG)
    assert [n.kind for n in tail.notable] == [LogKind.ERROR]
    assert "ProcessGroupNCCL preparing to dump debug info" in tail.notable[0].text
    assert tail.notable[0].time is None  # glog lines carry no year


def test_tqdm_carriage_returns_end_lines() -> None:
    redrawn = "\r".join(f"Rollout generation: {i}/8" for i in range(9))
    tail = parse_log_tail(SLIME_1487 + redrawn)
    assert tail.last_line == "Rollout generation: 8/8"
    assert tail.lines == 3 + 9


@pytest.mark.parametrize("cut", [0, 1, 40, 120, 200])
def test_a_cut_tail_parses_to_fewer_facts_never_an_error(cut: int) -> None:
    whole = parse_log_tail(SLIME_1487 + DRIVER_LOG)
    part = parse_log_tail(truncate_at(SLIME_1487 + DRIVER_LOG, cut))
    assert part.lines <= whole.lines


def test_a_traceback_keeps_its_exception_line() -> None:
    # slime.md §4: flush_cache raises this after 60 tries; the lines as Python prints a traceback.
    tb = (
        "Traceback (most recent call last):\n"
        '  File "/root/slime/slime/backends/sglang_utils/sglang_engine.py", line 301, in flush_cache\n'
        '    raise TimeoutError("Timeout while flushing cache.")\n'
        "TimeoutError: Timeout while flushing cache.\n"
    )
    tail = parse_log_tail(SLIME_1487 + tb)
    assert [(n.kind, n.text) for n in tail.notable] == [
        (LogKind.TRACEBACK, "TimeoutError: Timeout while flushing cache.")
    ]


def test_not_text_is_a_parse_error() -> None:
    with pytest.raises(ParseError):
        parse_log_tail(b"bytes")  # type: ignore[arg-type]


def test_slimes_http_retry_line_is_a_retry_not_an_error() -> None:
    # slime.md §7: slime/utils/http_utils.py:_post before each of its 60 tries.
    line = (
        "[2026-01-25 10:25:50] http_utils.py:118 - Error: Server disconnected, retrying... "
        "(attempt 7/60, url=http://10.0.0.2:3333/generate)"
    )
    tail = parse_log_tail(SLIME_1487 + line + "\n")
    assert [n.kind for n in tail.notable] == [LogKind.RETRY]


# Real Ray 2.60 log API answers (tests/fixtures/real/local-cpu-ray-2.60-logs, captured by
# tests/fixtures/capture_ray_logs.py): a driver log with the actors' forwarded lines, and the err and
# out streams of a train rank, an engine and a RolloutManager printing slime's and SGLang's lines.
RAY_LOGS = FIX / "real" / "local-cpu-ray-2.60-logs"


def _ray_log(pattern: str) -> str:
    (path,) = RAY_LOGS.glob(pattern)
    return path.read_text()


def test_real_log_api_tail_of_rank_0_ends_in_two_open_timers_of_one_second() -> None:
    tail = parse_log_tail(_ray_log("MegatronTrainRayActor-*-err.log"))
    assert [t.name for t in tail.open_timers] == ["train", "actor_train"]
    assert tail.open_timers[0].started == tail.open_timers[1].started  # one-second log times
    assert tail.lines == 5  # Ray's `:job_id:` / `:actor_name:` marker lines are not counted
    assert tail.last_line.endswith("Timer actor_train start") and not tail.notable


def test_real_worker_log_markers_are_not_the_last_line_of_an_empty_stream() -> None:
    tail = parse_log_tail(_ray_log("RolloutManager-*-out.log"))
    assert (tail.lines, tail.last_line, tail.last_time) == (0, "", None)


def test_real_engine_tail_refused_flush_with_its_counts() -> None:
    tail = parse_log_tail(_ray_log("SGLangEngine-*-err.log"))
    assert [n.kind for n in tail.notable] == [LogKind.CACHE_NOT_FLUSHED] * 3
    assert tail.pending_flush == (0, 1)


def test_real_rollout_manager_tail_retries_then_a_traceback() -> None:
    tail = parse_log_tail(_ray_log("RolloutManager-*-err.log"))
    assert [n.kind for n in tail.notable] == [LogKind.RETRY] * 3 + [LogKind.TRACEBACK]
    assert tail.notable[-1].text == "TimeoutError: Timeout while flushing cache."
    assert tail.last_line == "TimeoutError: Timeout while flushing cache."


def test_real_driver_log_reads_the_forwarded_lines_per_process() -> None:
    tail = parse_log_tail(_ray_log("driver-*.log"))
    assert [t.name for t in tail.open_timers] == ["train", "actor_train"]
    assert tail.open_timers[-1].text.startswith("(MegatronTrainRayActor pid=")
    kinds = [n.kind for n in tail.notable]
    assert kinds.count(LogKind.CACHE_NOT_FLUSHED) == 3 and kinds.count(LogKind.RETRY) == 3
    assert tail.notable[-1].kind is LogKind.TRACEBACK
    assert tail.pending_flush == (0, 1)
    assert tail.last_line.startswith("(RolloutManager pid=")  # colour codes stripped


def test_real_capture_records_are_whole_ok_answers() -> None:
    records = json.loads((RAY_LOGS / "records.json").read_text())
    assert {r["outcome"] for r in records} == {"ok"}
    assert {r["meta"]["status"] for r in records} == {200}
    assert not any(r["meta"]["truncated"] for r in records)
    actors = [r for r in records if r["meta"]["kind"] == "actor"]
    assert sorted(r["meta"]["class_name"] for r in actors) == sorted(
        ["MegatronTrainRayActor", "SGLangEngine", "RolloutManager"] * 2
    )
    assert {r["meta"]["suffix"] for r in actors} == {"err", "out"}
    assert {r["artifact"] for r in records} == {p.name for p in RAY_LOGS.glob("*.log")}
