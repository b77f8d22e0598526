"""Issue #12, item 12: one way to write a time, and no guessing about time zones.

Every time the project writes (conditions, gates, messages, Events, the Lease, logs, the JSON of
`simulate`) goes through `api.meta.format_time`: RFC 3339 in UTC with a "Z", as Kubernetes writes a
metav1.Time. An offset, in `--now` or in an object, is converted to UTC, never relabelled. A time
without a zone is an error (exit status 2), never taken as UTC or local time.
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from builders import (
    NOW,
    Obj,
    admitted,
    cluster_queue,
    pending,
    scenario,
    simulate,
)
from preemption_operator.api.meta import format_time
from preemption_operator.cli import cli
from preemption_operator.controller.leader import _micro_time
from preemption_operator.k8s.events import _timestamp
from preemption_operator.logs import JsonFormatter

PLUS_TWO = timezone(timedelta(hours=2))
MINUS_FIVE_THIRTY = timezone(-timedelta(hours=5, minutes=30))
PACKAGE = Path(__file__).resolve().parents[2] / "operator" / "preemption_operator"


# -- the formatter ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("moment", "digits", "text"),
    [
        (datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC), 0, "2026-01-01T12:00:00Z"),
        (datetime(2026, 1, 1, 12, 0, 0, tzinfo=PLUS_TWO), 0, "2026-01-01T10:00:00Z"),
        (datetime(2026, 1, 1, 1, 0, 0, tzinfo=PLUS_TWO), 0, "2025-12-31T23:00:00Z"),
        (datetime(2026, 1, 1, 20, 0, 0, tzinfo=MINUS_FIVE_THIRTY), 0, "2026-01-02T01:30:00Z"),
        (datetime(2026, 1, 1, 12, 0, 0, 987654, tzinfo=UTC), 0, "2026-01-01T12:00:00Z"),  # truncated, as metav1.Time
        (datetime(2026, 1, 1, 12, 0, 0, 987654, tzinfo=PLUS_TWO), 3, "2026-01-01T10:00:00.987Z"),
        (datetime(2026, 1, 1, 12, 0, 0, 987654, tzinfo=UTC), 6, "2026-01-01T12:00:00.987654Z"),
        (datetime(5, 3, 4, 5, 6, 7, tzinfo=UTC), 0, "0005-03-04T05:06:07Z"),
    ],
)
def test_format_time(moment: datetime, digits: int, text: str) -> None:
    assert format_time(moment, digits) == text


def test_a_naive_time_is_refused() -> None:
    with pytest.raises(ValueError, match="has no time zone"):
        format_time(datetime(2026, 1, 1))


def test_the_operators_writers_convert_offsets() -> None:
    moment = datetime(2026, 1, 1, 12, 0, 0, 123456, tzinfo=PLUS_TWO)
    assert _timestamp(moment) == "2026-01-01T10:00:00Z"  # Event firstTimestamp/lastTimestamp
    assert _micro_time(moment) == "2026-01-01T10:00:00.123456Z"  # Lease acquireTime/renewTime
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "hello", None, None)
    record.created = datetime(2026, 1, 1, 12, 0, 0, 250000, tzinfo=UTC).timestamp()
    assert json.loads(JsonFormatter().format(record))["time"] == "2026-01-01T12:00:00.250Z"


def test_no_other_time_formatting_in_the_package() -> None:
    """The formatter is the only place that turns a datetime into text (but for messages quoting
    a time as the input gave it)."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for line in path.read_text().splitlines():
            if re.search(r"\.(strftime|isoformat)\(|%Y-%m-%d", line):
                found.add((str(path.relative_to(PACKAGE)), line.strip()))
    assert found == {
        ("api/meta.py", 'raise ValueError(f"{moment.isoformat()} has no time zone")'),
        ("api/meta.py", 'shown = value.isoformat().replace("+00:00", "Z")'),
    }


# -- --now --------------------------------------------------------------------------------------------


def _objects() -> list[Obj]:
    return scenario(
        [cluster_queue("cq", 4, within="LowerPriority")],
        admitted("low", "cq", 4, priority=-1),
        pending("in", "cq", 2, priority=1),
    )


def _cli(objects: list[Obj], *args: str, command: str = "simulate") -> Any:
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "objects.yaml"
        path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
        return CliRunner().invoke(cli, [command, str(path), *args])


def test_now_with_an_offset_is_converted_not_relabelled() -> None:
    in_utc = _cli(_objects(), "--output", "json", "--now", "2026-11-30T00:00:00Z")
    with_offset = _cli(_objects(), "--output", "json", "--now", "2026-11-30T02:00:00+02:00")
    assert in_utc.exit_code == with_offset.exit_code == 0, with_offset.output
    assert with_offset.stdout == in_utc.stdout
    written = {
        c["lastTransitionTime"]
        for w in json.loads(with_offset.stdout)["workloads"]
        if w["name"] == "in"
        for c in w["status"]["conditions"]
    }
    assert written == {"2026-11-30T00:00:00Z"}


@pytest.mark.parametrize("command", ["simulate", "explain"])
@pytest.mark.parametrize("text", ["2026-11-30T00:00:00", "2026-11-30"])
def test_now_without_a_zone_exits_2(command: str, text: str) -> None:
    extra = ["--workload", "default/in"] if command == "explain" else []
    result = _cli(_objects(), "--now", text, *extra, command=command)
    assert result.exit_code == 2, result.output
    assert (
        f"error: --now: {text!r} has no time zone: write an RFC 3339 time such as 2026-01-01T00:00:00Z" in result.output
    )


# -- times in objects ---------------------------------------------------------------------------------


def test_offsets_in_objects_are_written_back_in_utc() -> None:
    # `low` keeps its admission (nothing needs its quota): its conditions come out as they came in,
    # converted to UTC, as the API server would store them.
    objects = scenario([cluster_queue("cq", 4)], admitted("low", "cq", 2, at="2026-01-01T12:00:00+02:00"))
    out = simulate(objects)
    assert {c["lastTransitionTime"] for c in out.statuses["low"]["conditions"]} == {"2026-01-01T10:00:00Z"}


def test_a_time_in_a_message_is_converted() -> None:
    # A toleration window measured from a reservation written with an offset ends at the same
    # instant, written in UTC.
    annotations = {
        "preemption-toleration.scheduling.x-k8s.io/minimum-preemptable-priority": "10",
        "preemption-toleration.scheduling.x-k8s.io/toleration-seconds": "3600",
    }
    tolerant = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": "tolerant", "annotations": annotations},
        "value": 0,
    }
    reserved = (NOW - timedelta(minutes=30)).astimezone(PLUS_TWO).isoformat()
    objects = scenario(
        [cluster_queue("cq", 4, within="LowerPriority")],
        admitted("low", "cq", 4, priority_class="tolerant", at=reserved),
        pending("in", "cq", 2, priority=1),
        extra=[tolerant],
    )
    out = simulate(objects, max_cycles=1)
    [explanation] = out.data["explanations"]
    [excluded] = [c for c in explanation["candidates"] if c["outcome"] == "excluded"]
    until = format_time(NOW + timedelta(minutes=30))
    assert excluded["detail"] == (
        f"WorkloadPriorityClass tolerant tolerates preemptors below priority 10 until {until} (preemptor has 1)"
    )
    assert until == "2026-11-30T00:30:00Z"


@pytest.mark.parametrize(
    ("where", "edit"),
    [
        ("metadata.creationTimestamp", lambda w: w["metadata"].update(creationTimestamp="2026-01-01T10:00:00")),
        (
            "status.conditions[0].lastTransitionTime",
            lambda w: w["status"]["conditions"][0].update(lastTransitionTime="2026-01-01T10:00:00"),
        ),
    ],
)
def test_a_naive_time_in_an_object_exits_2(where: str, edit: Any) -> None:
    objects = _objects()
    low = next(o for o in objects if o["metadata"]["name"] == "low")
    edit(low)
    result = _cli(objects, "--now", "2026-11-30T00:00:00Z")
    assert result.exit_code == 2, result.output
    assert f'Workload default/low: {where}: "2026-01-01T10:00:00" has no time zone' in result.output
