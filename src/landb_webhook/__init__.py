"""ExternalDNS webhook provider publishing cern.ch names as landb-alias metadata on ingress nodes."""

__version__ = "0.1.0"
