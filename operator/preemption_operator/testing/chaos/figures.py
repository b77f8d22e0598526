"""What a chaos run measured: kills survived, takeovers, outages, foreign writes, violations."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class Takeover:
    fault: str
    """'kill -9 (mid-batch)', 'kill -9', 'SIGSTOP', 'stall'."""
    victim: str
    at: float
    lease_s: float | None = None
    """Fault until another replica held the Lease."""
    first_admission_s: float | None = None
    """Fault until the new holder's first admission."""
    note: str = ""


@dataclass
class Outage:
    down_s: float
    deleted_while_down: int
    recovery_s: float | None
    """API server ready again until I4 held (None: not within the bound)."""
    ghost_patches_404: int
    ghost_patch_rate_max: float
    problems: list[str] = field(default_factory=list)


@dataclass
class Figures:
    takeovers: list[Takeover] = field(default_factory=list)
    outages: list[Outage] = field(default_factory=list)
    settles: list[tuple[str, float | None]] = field(default_factory=list)
    injected: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)
    foreign_writes: int = 0
    foreign_seconds: float = 0.0
    driver: Counter[str] = field(default_factory=Counter)

    @property
    def kills(self) -> list[Takeover]:
        return [t for t in self.takeovers if t.fault.startswith("kill")]

    def kills_survived(self) -> int:
        """Kills after which some replica admitted again."""
        return sum(1 for t in self.kills if t.first_admission_s is not None)

    def markdown(self) -> str:
        def fmt(value: float | None) -> str:
            return "—" if value is None else f"{value:.2f}"

        def spread(values: list[float]) -> str:
            if not values:
                return "—"
            values = sorted(values)
            return f"{values[len(values) // 2]:.1f} / {values[-1]:.1f} (n={len(values)})"

        kills = self.kills
        lines = ["| measure | value |", "|---|---:|"]
        if kills:
            lines += [
                f"| kill -9 of an operator (mid-batch) | {len(kills)} ({sum(1 for k in kills if 'mid-batch' in k.fault)}) |",
                f"| kills survived (a replica admitted again) | {self.kills_survived()} |",
            ]
        if self.takeovers:
            lines += [
                f"| takeover, fault → new Lease holder, median / max (s) | {spread([t.lease_s for t in self.takeovers if t.lease_s is not None])} |",
                f"| takeover, fault → new holder's first admission, median / max (s) | {spread([t.first_admission_s for t in self.takeovers if t.first_admission_s is not None])} |",
            ]
        for o in self.outages:
            lines.append(
                f"| API-server outage {o.down_s:.0f} s, {o.deleted_while_down} deletes while down: recovery to I4 (s) | {fmt(o.recovery_s)} |"
            )
            lines.append(
                f"| ... PATCHes answered 404 after the restart (max per second) | {o.ghost_patches_404} ({o.ghost_patch_rate_max:.0f}) |"
            )
        if self.foreign_seconds:
            lines.append(
                f"| foreign writer: writes, writes/s | {self.foreign_writes}, {self.foreign_writes / self.foreign_seconds:.1f} |"
            )
        if self.injected:
            lines.append(f"| injected faults | {', '.join(f'{k}: {v}' for k, v in sorted(self.injected.items()))} |")
        if self.driver:
            lines.append(f"| load | {', '.join(f'{k}: {v}' for k, v in sorted(self.driver.items()))} |")
        for label, seconds in self.settles:
            lines.append(
                f"| settle (I4) after {label} (s) | {fmt(seconds) if seconds is not None else 'not within the bound'} |"
            )
        return "\n".join(lines)

    def takeover_table(self) -> str:
        lines = ["| fault | victim | → Lease (s) | → first admission (s) | note |", "|---|---|---:|---:|---|"]
        for t in self.takeovers:
            lines.append(
                f"| {t.fault} | {t.victim} | {'—' if t.lease_s is None else f'{t.lease_s:.1f}'} | "
                f"{'—' if t.first_admission_s is None else f'{t.first_admission_s:.1f}'} | {t.note} |"
            )
        return "\n".join(lines)
