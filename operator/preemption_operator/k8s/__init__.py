"""Adapters to the Kubernetes API: typed resources, status writes and Events (lightkube)."""
