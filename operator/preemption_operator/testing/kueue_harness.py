"""benchmarks/kueue-harness/'s scripts as modules, for their tests and the benchmarks that run
Kueue beside the operator (their folder's name, kueue-harness, cannot be imported as a package)."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from .control_plane import SOURCE_ROOT

FOLDER = SOURCE_ROOT / "benchmarks" / "kueue-harness"
HARNESS = FOLDER / "harness.py"
REPLAY_STATES = FOLDER / "replay_states.py"


def _load(name: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@functools.cache
def kueue_harness() -> ModuleType:
    return _load("kueue_harness", HARNESS)


@functools.cache
def replay_states() -> ModuleType:
    """replay_states.py: a harness run's states through Kueue's scheduler and the engine."""
    return _load("replay_states", REPLAY_STATES)
