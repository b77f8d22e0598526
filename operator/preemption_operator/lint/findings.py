"""What `lint` reports: findings with a severity, gathered in a report with the proof of the
flapping analysis."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .proof import Proof

Severity = Literal["error", "warning", "info"]
SEVERITIES: tuple[Severity, ...] = ("info", "warning", "error")


@dataclass(frozen=True)
class Finding:
    code: str
    severity: Severity
    message: str
    objects: tuple[str, ...]
    witness: str | None = None


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    proof: Proof | None = None
    checks: tuple[str, ...] = ()
    """The codes every run checks (the JSON lists them)."""
    not_checked: tuple[str, ...] = ()

    def add(self, code: str, severity: Severity, message: str, *objects: str, witness: str | None = None) -> None:
        self.findings.append(Finding(code, severity, message, tuple(objects), witness))

    def at_or_above(self, severity: Severity) -> list[Finding]:
        floor = SEVERITIES.index(severity)
        return [f for f in self.findings if SEVERITIES.index(f.severity) >= floor]

    def to_dict(self) -> dict[str, Any]:
        """The JSON contract of `lint --output json` (docs/lint.md)."""
        return {
            "findings": [{**asdict(f), "objects": list(f.objects)} for f in self.findings],
            "checks": list(self.checks),
            "notChecked": list(self.not_checked),
            "proof": self.proof.to_dict() if self.proof is not None else None,
        }
