"""The operator: informers feed the engine's cache; a loop runs cycles and applies decisions.

The feeder stays thin (parse, update the cache, wake the loop); every decision comes from the
engine; every status write goes through k8s.writer, every Event through k8s.events.
"""
