"""The operator: kopf watches feed the engine's cache; a loop runs cycles and applies decisions.

Handlers stay thin (parse, update the cache, wake the loop); every decision comes from the
engine; every write goes through k8s.writer.
"""
