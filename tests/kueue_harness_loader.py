"""benchmarks/kueue-harness/harness.py as a module, for the tests of it (its folder's name,
kueue-harness, cannot be imported as a package)."""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

HARNESS = Path(__file__).resolve().parents[1] / "benchmarks" / "kueue-harness" / "harness.py"


@functools.cache
def kueue_harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kueue_harness", HARNESS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module
