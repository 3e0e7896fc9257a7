"""Beside the apply path: the publication log, the DNS watch, the names' Kubernetes Events and their
emitter, and the periodic worker they run on."""
