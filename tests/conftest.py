"""Shared test settings: hypothesis profiles sized for a 2-core CI machine."""

from hypothesis import settings

settings.register_profile("default", max_examples=40, deadline=None)
settings.load_profile("default")
