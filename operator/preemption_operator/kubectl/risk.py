"""Preemption risk: for each admitted workload, the pending workloads that would take it and by
which rule. One scheduling cycle of the engine on the live state, with complete explanations:
a candidate chosen, or eligible but spared (not needed, or not enough with the rest), is at risk
from that preemptor: it goes as soon as the preemptor fits with it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .listing import Risk

AT_RISK = ("chosen", "spared")


def risks(simulation: Mapping[str, Any]) -> dict[str, list[Risk]]:
    """Victim key -> who threatens it, from a simulation's explanations (`Simulation.to_dict()`)."""
    found: dict[str, list[Risk]] = {}
    for explanation in simulation.get("explanations") or []:
        preemptor = str(explanation.get("preemptor") or "")
        for candidate in explanation.get("candidates") or []:
            if candidate.get("outcome") not in AT_RISK:
                continue
            # The rule as the explanation names its source ("classic (InClusterQueue)", a config's rule).
            risk = Risk(preemptor, str(candidate.get("source") or ""))
            listed = found.setdefault(str(candidate.get("workload")), [])
            if risk not in listed:
                listed.append(risk)
    return found
