#!/usr/bin/env python3
"""Builds the job controllers the cluster tests run (the JobSet controller, the LeaderWorkerSet
controller and the KubeRay operator, from their Go modules) into
~/.cache/preemption-operator/controllers, once; prints each binary's path. Nothing is installed
outside that cache and Go's module cache.

    python hack/setup-controllers.py [NAME ...]     (default: every known controller)
"""

from __future__ import annotations

import sys

from preemption_operator.testing import go_modules
from preemption_operator.testing.job_controllers import BUILDS, build


def main(argv: list[str]) -> int:
    names = argv or list(BUILDS)
    unknown = sorted(set(names) - set(BUILDS))
    if unknown:
        print(
            f"setup-controllers: unknown controller(s) {', '.join(unknown)}: known are {', '.join(BUILDS)}",
            file=sys.stderr,
        )
        return 2
    for name in names:
        module, version = BUILDS[name]
        if not go_modules.installed(module, version, name):
            print(f"setup-controllers: building {name} from {module}@{version} (cold: 3 to 6 minutes)", file=sys.stderr)
        try:
            print(build(name))
        except go_modules.ModuleUnavailable as exc:
            print(f"setup-controllers: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
