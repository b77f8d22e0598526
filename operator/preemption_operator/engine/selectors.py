"""Label selectors with apimachinery's semantics, built once and matched many times."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from ..api.meta import LabelSelector

OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")

_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def valid_key(key: str) -> bool:
    """A qualified label key: an optional DNS-subdomain prefix and a name of at most 63 characters."""
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _PREFIX.match(prefix)):
        return False
    return 0 < len(name) <= 63 and bool(_NAME.match(name))


def valid_value(value: str) -> bool:
    return value == "" or (len(value) <= 63 and bool(_NAME.match(value)))


class SelectorError(ValueError):
    """A selector that cannot be built; the text says which requirement and why."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        if self.operator == "Exists":
            return present
        return not present  # DoesNotExist


@dataclass(frozen=True)
class Selector:
    """A built selector. `everything` and `nothing` are the two degenerate ones."""

    requirements: tuple[Requirement, ...] = ()
    matches_nothing: bool = False

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        if self.matches_nothing:
            return False
        labels = labels or {}
        return all(req.matches(labels) for req in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.matches_nothing and not self.requirements


EVERYTHING = Selector()
NOTHING = Selector(matches_nothing=True)


def build(selector: LabelSelector | None, *, nil: Selector) -> Selector:
    """Builds a selector. A nil selector becomes `nil` (Kubernetes fields differ on what nil means:
    `namespaceSelector` selects nothing, a candidate's `labelSelector` filters nothing); `{}`
    always selects everything."""
    if selector is None:
        return nil
    requirements: list[Requirement] = []
    for key, value in sorted((selector.match_labels or {}).items()):
        if not valid_key(key):
            raise SelectorError(f"matchLabels: invalid label key {key!r}")
        if not valid_value(value):
            raise SelectorError(f"matchLabels[{key}]: invalid label value {value!r}")
        requirements.append(Requirement(key, "In", frozenset({value})))
    for index, expr in enumerate(selector.match_expressions or []):
        values = frozenset(expr.values or [])
        where = f"matchExpressions[{index}]"
        if expr.operator not in OPERATORS:
            raise SelectorError(f'{where}: "{expr.operator}" is not a valid label selector operator')
        if expr.operator in ("In", "NotIn") and not values:
            raise SelectorError(f"{where}: for 'in', 'notin' operators, values set can't be empty")
        if expr.operator in ("Exists", "DoesNotExist") and values:
            raise SelectorError(f"{where}: values set must be empty for exists and does not exist")
        if not valid_key(expr.key):
            raise SelectorError(f"{where}: invalid label key {expr.key!r}")
        bad = sorted(v for v in values if not valid_value(v))
        if bad:
            raise SelectorError(f"{where}: invalid label value {bad[0]!r}")
        requirements.append(Requirement(expr.key, expr.operator, values))
    return Selector(tuple(requirements))


_TERM = re.compile(
    r"^\s*(?:(?P<absent>!)\s*(?P<akey>[^\s!=<>(),]+)"
    r"|(?P<key>[^\s!=<>(),]+)\s*(?:(?P<op>==|=|!=)\s*(?P<value>[^\s!=<>(),]*)"
    r"|\s+(?P<set>in|notin)\s*\((?P<values>[^()]*)\))?)\s*$"
)


def parse(text: str) -> LabelSelector:
    """A label selector written as kubectl's `-l` takes it (apimachinery's labels.Parse:
    `key`, `!key`, `key=value`, `key!=value`, `key in (a,b)`, `key notin (a,b)`, joined by
    commas), or as the metav1.LabelSelector of a Kueue configuration, in JSON or YAML flow style
    (`{matchLabels: {team: a}}`). Not checked here: `build` does. The empty text selects
    everything. ValueError says what cannot be read."""
    from ..api.meta import LabelSelectorRequirement

    stripped = text.strip()
    if stripped.startswith("{"):
        import yaml

        try:
            loaded = yaml.safe_load(stripped)
            return LabelSelector.model_validate(loaded)
        except (yaml.YAMLError, ValueError) as exc:
            raise ValueError(f"not a label selector: {exc}") from None
    terms: list[str] = []
    depth, start = 0, 0
    for at, char in enumerate(stripped):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            terms.append(stripped[start:at])
            start = at + 1
    if stripped:
        terms.append(stripped[start:])
    expressions = []
    for term in terms:
        found = _TERM.match(term)
        if found is None:
            raise ValueError(
                f"cannot read {term.strip()!r}: write key, !key, key=value, key!=value, key in (a,b) or key notin (a,b)"
            )
        if found["absent"]:
            expressions.append(LabelSelectorRequirement(key=found["akey"], operator="DoesNotExist"))
        elif found["op"]:
            operator = "NotIn" if found["op"] == "!=" else "In"
            expressions.append(LabelSelectorRequirement(key=found["key"], operator=operator, values=[found["value"]]))
        elif found["set"]:
            values = [value.strip() for value in found["values"].split(",")]
            operator = "In" if found["set"] == "in" else "NotIn"
            expressions.append(
                LabelSelectorRequirement(key=found["key"], operator=operator, values=[v for v in values if v])
            )
        else:
            expressions.append(LabelSelectorRequirement(key=found["key"], operator="Exists"))
    return LabelSelector(match_expressions=expressions) if expressions else LabelSelector()
