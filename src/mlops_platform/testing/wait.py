"""Wait on conditions with timeouts: :func:`mlops_platform.runtime.wait.until`, for tests."""

from mlops_platform.runtime.wait import until

__all__ = ["until"]
