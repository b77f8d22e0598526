"""PreemptionLimit: sliding windows of past preemptions, and whether a (preemptor, victim) pair
still has room in every limit that covers it.

The windows are rebuilt from the cluster's own record, never from memory alone: a past preemption
is read from the victim Workload's `Preempted` condition (True while evicted; False with
`Previously: <message>` once it is admitted again, then counted at the re-admission time, later
than the eviction: a restart may count a preemption a little longer, never shorter). Pure: the
time is always the caller's `now`.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

from ..api.duration import DurationError, parse_duration
from ..api.v1alpha1 import PreemptionLimit
from ..api.v1beta2 import Workload
from .protection import LAST_RESORT_SUFFIX
from .reasons import CONFIGURABLE_PREEMPTION, HUMAN_REASONS
from .selectors import EVERYTHING, Selector, SelectorError, build

GLOBAL = "Global"
PREVIOUSLY = "Previously: "
HISTORY_PER_WORKLOAD = 16
"""Past preemptions the cache keeps per victim (its status records only the latest one)."""

_CONFIGURABLE = re.compile(
    r"^Preempted by (?P<preemptor>[^/\s]+/\S+) because of preemption config (?P<config>\S+) rule (?P<rules>.+)$"
)
_CLASSIC = re.compile(r" due to (?P<human>.+); preemptor path: (?P<preemptor>\S*); preemptee path: (?P<victim>\S*)$")
_BY_HUMAN = {human: reason for reason, human in HUMAN_REASONS.items()}


@dataclass(frozen=True)
class PastPreemption:
    """One preemption as the victim's status records it. Who preempted is known by key for
    configurable preemption, by ClusterQueue (the preemptor path's last element) for classic and
    fair sharing; a ClusterQueue left None is resolved in the snapshot from the workload's key."""

    at: datetime
    victim: str
    victim_cluster_queue: str | None
    preemptor: str | None
    preemptor_cluster_queue: str | None
    mechanism: str
    config: str | None = None
    rules: tuple[str, ...] = ()
    message: str = ""
    readmitted: bool = False
    """Read from `Previously:`: the victim was admitted again at `at`."""

    @property
    def identity(self) -> tuple[object, ...]:
        """The same preemption seen twice (evicted, then re-admitted) has the same identity (the
        reason is gone from a `Previously:` condition: the message says who and why)."""
        return (self.victim, self.preemptor, self.preemptor_cluster_queue, self.message)


def _rule_names(described: str) -> tuple[str, ...]:
    # RuleMatch.describe: "rule/0,1; other/2"
    return tuple(part.rpartition("/")[0] or part for part in described.split("; ") if part)


def past_preemption(workload: Workload) -> PastPreemption | None:
    """The latest preemption a Workload's status records, or None."""
    status = workload.status
    conditions = {c.type: c for c in (status.conditions or [])} if status is not None else {}
    preempted = conditions.get("Preempted")
    if preempted is None:
        return None
    if preempted.status == "True":
        evicted = conditions.get("Evicted")
        if evicted is None or evicted.status != "True" or evicted.reason != "Preempted":
            return None
        message, mechanism, readmitted = preempted.message, preempted.reason, False
    elif preempted.message.startswith(PREVIOUSLY):
        message, mechanism, readmitted = preempted.message[len(PREVIOUSLY) :], "", True
    else:
        return None
    message = message.removesuffix(LAST_RESORT_SUFFIX)
    victim = f"{workload.metadata.namespace or ''}/{workload.metadata.name}"
    admission = status.admission if status is not None else None
    victim_cq = admission.cluster_queue if admission is not None else None
    found = _CONFIGURABLE.match(message)
    if found is not None:
        return PastPreemption(
            preempted.last_transition_time,
            victim,
            victim_cq,
            found["preemptor"],
            None,
            mechanism or CONFIGURABLE_PREEMPTION,
            found["config"],
            _rule_names(found["rules"]),
            message,
            readmitted,
        )
    found = _CLASSIC.search(message)
    if found is not None:
        preemptor_cq = found["preemptor"].rpartition("/")[2] or None
        return PastPreemption(
            preempted.last_transition_time,
            victim,
            victim_cq or found["victim"].rpartition("/")[2] or None,
            None,
            preemptor_cq,
            mechanism or _BY_HUMAN.get(found["human"], "Preempted"),
            message=message,
            readmitted=readmitted,
        )
    # A message this project does not write: still a preemption, counted by every limit that
    # covers everything (the victim is known).
    return PastPreemption(
        preempted.last_transition_time,
        victim,
        victim_cq,
        None,
        None,
        mechanism or "Preempted",
        message=message,
        readmitted=readmitted,
    )


def remember(history: list[PastPreemption], found: PastPreemption) -> None:
    """Adds a preemption read from a status to a victim's history. The same record read again
    changes nothing; an eviction read again once the victim is admitted again moves to the later
    time; anything else is another preemption (a condition's time moves only when it flips), so
    the same preemptor evicting the same workload twice counts twice. The oldest go first."""
    for i, known in enumerate(history):
        if known.identity != found.identity:
            continue
        if known.at == found.at and known.readmitted == found.readmitted:
            return
        if not known.readmitted and found.readmitted and found.at >= known.at:
            history[i] = found
            return
    history.append(found)
    history.sort(key=lambda p: p.at)
    del history[:-HISTORY_PER_WORKLOAD]


class Pair(NamedTuple):
    """A (preemptor, victim) preemption as a limit sees it (a tuple: one is made per candidate)."""

    preemptor: str | None
    preemptor_cluster_queue: str | None
    victim: str
    victim_cluster_queue: str | None
    config: str | None = None
    rules: tuple[str, ...] = ()


_KEYS: dict[str, Callable[[Pair], str | None]] = {
    GLOBAL: lambda pair: GLOBAL,
    "PreemptingClusterQueue": lambda pair: pair.preemptor_cluster_queue,
    "PreemptedClusterQueue": lambda pair: pair.victim_cluster_queue,
    "PreemptedWorkload": lambda pair: pair.victim,
}


@dataclass(frozen=True)
class Rule:
    """A PreemptionLimit, built."""

    name: str
    scope: str
    limit: int
    window: timedelta
    config_selector: Selector | None
    cluster_queue_selector: Selector
    rule_names: frozenset[str] | None
    covers_everything: bool = field(init=False)
    """Neither configSelector nor ruleNames: classic, fair sharing and configurable preemptions."""
    any_queue: bool = field(init=False)
    _key: Callable[[Pair], str | None] = field(init=False)

    def __post_init__(self) -> None:
        # Asked for every candidate of every search: decided once.
        set_ = object.__setattr__
        set_(self, "covers_everything", self.config_selector is None and self.rule_names is None)
        set_(self, "any_queue", self.cluster_queue_selector.empty)
        set_(self, "_key", _KEYS[self.scope])

    def key(self, pair: Pair) -> str | None:
        return self._key(pair)

    def selected_queue(self, pair: Pair) -> str | None:
        # clusterQueueSelector reads the preemptor's queue for PreemptingClusterQueue and the
        # victim's for every other scope (the queue whose workloads a limit protects).
        return pair.preemptor_cluster_queue if self.scope == "PreemptingClusterQueue" else pair.victim_cluster_queue


def build_limit(limit: PreemptionLimit) -> Rule:
    """Raises ValueError naming the field when the limit cannot be built."""
    spec = limit.spec
    try:
        config_selector = build(spec.config_selector, nil=EVERYTHING) if spec.config_selector is not None else None
    except SelectorError as exc:
        raise ValueError(f"spec.configSelector: {exc}") from None
    try:
        cq_selector = build(spec.cluster_queue_selector, nil=EVERYTHING)
    except SelectorError as exc:
        raise ValueError(f"spec.clusterQueueSelector: {exc}") from None
    try:
        window = parse_duration(spec.limit_window_duration)
    except DurationError as exc:
        raise ValueError(f"spec.limitWindowDuration: {exc}") from None
    if window < timedelta(seconds=1):
        raise ValueError("spec.limitWindowDuration: must be at least 1s")
    names = frozenset(spec.rule_names) if spec.rule_names is not None else None
    return Rule(limit.name, spec.scope, spec.limit, window, config_selector, cq_selector, names)


@dataclass(frozen=True)
class Blocked:
    """A limit without room for a pair: which, for which key, and when it has room again (None:
    never by time alone, a limit of 0)."""

    limit: str
    key: str
    retry_at: datetime | None

    def describe(self) -> str:
        return f"blocked by PreemptionLimit {self.limit} ({self.key})"


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def _micros(moment: datetime) -> int:
    # Windows hold integer microseconds: compared per candidate, much faster than datetimes.
    return (moment - _EPOCH) // _MICROSECOND


@dataclass
class LimitBook:
    """The windows of every valid PreemptionLimit: past preemptions (from statuses, kept current
    by the cache as Workloads come in) and, in a pass's copy (`at`), those decided since and the
    evictions being written (`record`), which never reach the shared windows."""

    now: datetime
    rules: list[Rule]
    config_labels: Callable[[str], Mapping[str, str] | None]
    queue_labels: Callable[[str], Mapping[str, str] | None]
    invalid: dict[str, str] = field(default_factory=dict)
    _times: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    """Shared by every pass's copy."""
    _added: dict[tuple[str, str], list[int]] = field(default_factory=dict)
    """This pass's own."""
    version: int = 0
    """How many preemptions this pass recorded: a decision taken at an older version is checked again."""
    _since: dict[str, int] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        limits: Iterable[PreemptionLimit],
        now: datetime,
        *,
        config_labels: Callable[[str], Mapping[str, str] | None],
        queue_labels: Callable[[str], Mapping[str, str] | None],
    ) -> LimitBook:
        rules, invalid = [], {}
        for limit in sorted(limits, key=lambda lim: lim.name):
            try:
                rules.append(build_limit(limit))
            except ValueError as exc:
                invalid[limit.name] = str(exc)
        return cls(now, rules, config_labels, queue_labels, invalid)

    def at(self, now: datetime) -> LimitBook:
        """A pass's copy at `now`: it reads the shared windows, and records into its own."""
        return LimitBook(now, self.rules, self.config_labels, self.queue_labels, self.invalid, self._times)

    def covers(self, rule: Rule, pair: Pair) -> bool:
        if rule.covers_everything and rule.any_queue:
            return True
        if not rule.covers_everything:
            if pair.config is None:
                return False  # only configurable preemptions are selected by config or rule
            if rule.config_selector is not None and not rule.config_selector.matches(self.config_labels(pair.config)):
                return False
            if rule.rule_names is not None and rule.rule_names.isdisjoint(pair.rules):
                return False
        if not rule.any_queue:
            queue = rule.selected_queue(pair)
            if queue is None or not rule.cluster_queue_selector.matches(self.queue_labels(queue)):
                return False
        return True

    def _keys(self, pair: Pair) -> Iterator[tuple[str, str]]:
        for rule in self.rules:
            key = rule.key(pair)
            if key is not None and self.covers(rule, pair):
                yield rule.name, key

    def add(self, pair: Pair, at: datetime) -> None:
        """A past preemption, into the shared windows."""
        for slot in self._keys(pair):
            bisect.insort(self._times.setdefault(slot, []), _micros(at))

    def discard(self, pair: Pair, at: datetime) -> None:
        """Takes back what `add` put in (a record replaced by a newer one)."""
        for slot in self._keys(pair):
            times = self._times.get(slot)
            if times:
                i = bisect.bisect_left(times, _micros(at))
                if i < len(times) and times[i] == _micros(at):
                    del times[i]
                if not times:
                    del self._times[slot]

    def record(self, pair: Pair, at: datetime) -> None:
        """A preemption decided in this pass (or being written), in this copy only."""
        self.version += 1
        for slot in self._keys(pair):
            bisect.insort(self._added.setdefault(slot, []), _micros(at))

    def prune(self) -> None:
        """Drops shared times no window reaches any more (the clock only moves forward)."""
        windows = {rule.name: rule.window for rule in self.rules}
        for slot in list(self._times):
            window = windows.get(slot[0])
            times = self._times[slot]
            if window is None:
                del self._times[slot]
                continue
            del times[: bisect.bisect_right(times, _micros(self.now - window))]
            if not times:
                del self._times[slot]

    def _inside(self, rule: Rule, key: str, now: datetime | None = None) -> list[int]:
        # Inside the window: later than now - window (a time past `now`, a clock skew, counts too).
        since = _micros((self.now if now is None else now) - rule.window)
        out: list[int] = []
        for source in (self._times, self._added):
            times = source.get((rule.name, key))
            if times:
                out += times[bisect.bisect_right(times, since) :]
        if self._added:
            out.sort()
        return out

    def blocking(self, pair: Pair, pending: Iterable[Pair] = ()) -> Blocked | None:
        """The first limit (by name) without room for `pair`, counting `pending`: pairs a search
        has taken so far but not decided."""
        pending = list(pending)
        for rule in self.rules:
            key = rule.key(pair)
            if key is None or not self.covers(rule, pair):
                continue
            taken = sum(1 for p in pending if rule.key(p) == key and self.covers(rule, p)) if pending else 0
            if self._count(rule, key) + taken >= rule.limit:
                return Blocked(rule.name, key, self._room_at(rule, self._inside(rule, key), taken))
        return None

    def _count(self, rule: Rule, key: str) -> int:
        since = self._since.get(rule.name)
        if since is None:
            since = self._since[rule.name] = _micros(self.now - rule.window)
        count = 0
        for source in (self._times, self._added):
            times = source.get((rule.name, key))
            if times:
                count += len(times) - bisect.bisect_right(times, since)
        return count

    def _room_at(self, rule: Rule, inside: list[int], taken: int) -> datetime | None:
        # Room for one more once enough of the oldest leave the window (at their time + window).
        leaving = len(inside) + taken - rule.limit + 1
        if rule.limit == 0 or leaving > len(inside):
            return None
        return _EPOCH + timedelta(microseconds=inside[leaving - 1]) + rule.window

    def counts(self, limit_name: str, now: datetime | None = None) -> dict[str, int]:
        """Preemptions inside the limit's window per key, at `now` (default: the book's):
        what the operator writes to status.count."""
        rule = next((r for r in self.rules if r.name == limit_name), None)
        if rule is None:
            return {}
        keys = sorted({key for name, key in (*self._times, *self._added) if name == limit_name})
        out = {}
        for key in keys:
            inside = self._inside(rule, key, now)
            if inside:
                out[key] = len(inside)
        return out

    def problems(self) -> dict[str, str]:
        """Limits that cannot be built (name -> problem): they limit nothing until fixed."""
        return dict(self.invalid)
