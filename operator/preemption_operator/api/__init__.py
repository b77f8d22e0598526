"""The Kubernetes API of the operator: pydantic models, the one source of the CRD schemas."""
