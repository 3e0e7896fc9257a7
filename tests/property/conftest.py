"""Hypothesis profiles for the domain-core properties.

``dev`` (the default) is Hypothesis' own budget; ``ci`` searches harder; ``deep`` is for a bug hunt after
changing a rule (minutes). Pick one with ``HYPOTHESIS_PROFILE=ci``. None has a deadline: a shared 2-core
runner must not turn a slow example into a failure.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("dev", deadline=None)
settings.register_profile(
    "ci",
    max_examples=200,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("deep", parent=settings.get_profile("ci"), max_examples=3000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
