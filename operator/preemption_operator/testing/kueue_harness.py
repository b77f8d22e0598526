"""benchmarks/kueue-harness/harness.py as a module, for its tests and the benchmarks that run
Kueue beside the operator (its folder's name, kueue-harness, cannot be imported as a package)."""

from __future__ import annotations

import functools
import importlib.util
import sys
from types import ModuleType

from .control_plane import SOURCE_ROOT

HARNESS = SOURCE_ROOT / "benchmarks" / "kueue-harness" / "harness.py"


@functools.cache
def kueue_harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("kueue_harness", HARNESS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module
