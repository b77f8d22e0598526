"""preemption-operator: decides which running workloads to evict so that another one can run."""

__version__ = "0.1.0"
