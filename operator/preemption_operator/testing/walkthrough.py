"""The numbered steps of an example's README, as a test runs them: each step is a heading
`### N. What happens` followed by one ```sh block of kubectl commands, one a line, which a user
types in that order. A test runs the very commands the README shows, so the two cannot drift."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

HEADING = re.compile(r"^### (\d+)\. (.+)$", re.M)
BLOCK = re.compile(r"```sh\n(.*?)```", re.S)


@dataclass(frozen=True)
class Step:
    number: int
    title: str
    commands: tuple[tuple[str, ...], ...]
    """Each command as its words (shell quoting removed), kubectl first."""


def steps(text: str) -> list[Step]:
    """The README's numbered steps, in order. ValueError when they are not numbered 1, 2, ...,
    a step has not exactly one ```sh block, or a line of it is not a kubectl command."""
    headings = list(HEADING.finditer(text))
    found = []
    for index, heading in enumerate(headings):
        number, title = int(heading.group(1)), heading.group(2).strip()
        if number != index + 1:
            raise ValueError(f"step {title!r} is numbered {number}, expected {index + 1}")
        end = headings[index + 1].start() if index + 1 < len(headings) else len(text)
        section = text[heading.end() : end]
        nxt = re.search(r"^#{1,3} ", section, re.M)  # a later heading of any level ends the step
        blocks = BLOCK.findall(section[: nxt.start()] if nxt else section)
        if len(blocks) != 1:
            raise ValueError(f"step {number} ({title}) has {len(blocks)} ```sh blocks, expected 1")
        commands = []
        for line in blocks[0].splitlines():
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            words = tuple(shlex.split(line, comments=True))
            if words[0] != "kubectl":
                raise ValueError(f"step {number} ({title}): {line!r} is not a kubectl command")
            commands.append(words)
        found.append(Step(number, title, tuple(commands)))
    return found
