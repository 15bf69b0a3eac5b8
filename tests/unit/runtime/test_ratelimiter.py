"""Rate limiters: client-go default_rate_limiters.go semantics."""

from __future__ import annotations

import pytest

from mlops_platform.runtime.clock import FakeClock
from mlops_platform.runtime.ratelimiter import (
    BucketRateLimiter,
    ItemExponentialFailureRateLimiter,
    MaxOfRateLimiter,
    RateLimiter,
    default_controller_rate_limiter,
)


def test_exponential_backoff_sequence_doubles_from_base() -> None:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    delays = [limiter.when("a") for _ in range(6)]
    assert delays == pytest.approx([0.005, 0.010, 0.020, 0.040, 0.080, 0.160])
    assert limiter.num_requeues("a") == 6


def test_exponential_backoff_is_per_item() -> None:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    limiter.when("a")
    limiter.when("a")
    assert limiter.when("b") == pytest.approx(0.005)
    assert limiter.num_requeues("a") == 2
    assert limiter.num_requeues("b") == 1


def test_exponential_backoff_caps_at_max() -> None:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    delays = [limiter.when("a") for _ in range(30)]
    # 0.005 * 2**17 = 655.36 < 1000 < 0.005 * 2**18
    assert delays[17] == pytest.approx(655.36)
    assert delays[18:] == [1000.0] * 12


@pytest.mark.parametrize("failures", [1023, 1024, 1100, 10**6, 10**30])
def test_exponential_backoff_is_overflow_safe(failures: int) -> None:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    limiter._failures["a"] = failures
    assert limiter.when("a") == 1000.0
    assert limiter.num_requeues("a") == failures + 1


def test_forget_resets_backoff() -> None:
    limiter: ItemExponentialFailureRateLimiter[str] = ItemExponentialFailureRateLimiter(0.005, 1000.0)
    for _ in range(5):
        limiter.when("a")
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == pytest.approx(0.005)
    limiter.forget("never-seen")  # no error


def test_negative_delays_are_rejected() -> None:
    with pytest.raises(ValueError, match=">= 0"):
        ItemExponentialFailureRateLimiter(-1.0, 1.0)


def test_bucket_first_burst_is_immediate_then_spaced_by_one_over_qps() -> None:
    clock = FakeClock()
    limiter: BucketRateLimiter[str] = BucketRateLimiter(qps=10, burst=100, clock=clock)
    assert [limiter.when(f"i{i}") for i in range(100)] == [0.0] * 100
    following = [limiter.when(f"j{i}") for i in range(5)]
    assert following == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])


def test_bucket_refills_with_time_but_not_beyond_burst() -> None:
    clock = FakeClock()
    limiter: BucketRateLimiter[str] = BucketRateLimiter(qps=10, burst=2, clock=clock)
    assert [limiter.when("x") for _ in range(3)] == pytest.approx([0.0, 0.0, 0.1])  # tokens now -1
    clock.step(0.1)  # back to 0 tokens
    assert limiter.when("x") == pytest.approx(0.1)
    clock.step(1000.0)  # refills to burst (2), not more
    assert [limiter.when("x") for _ in range(3)] == pytest.approx([0.0, 0.0, 0.1])


def test_bucket_does_not_track_items() -> None:
    limiter: BucketRateLimiter[str] = BucketRateLimiter(qps=1, burst=1, clock=FakeClock())
    limiter.when("a")
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    assert limiter.when("a") == pytest.approx(1.0)  # forget does not give tokens back


@pytest.mark.parametrize(("qps", "burst"), [(0, 1), (-1, 1), (1, 0)])
def test_bucket_rejects_invalid_parameters(qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        BucketRateLimiter(qps=qps, burst=burst)


class _Fixed:
    def __init__(self, delay: float, requeues: int) -> None:
        self.delay = delay
        self.requeues = requeues
        self.calls: list[str] = []
        self.forgotten: list[str] = []

    def when(self, item: str) -> float:
        self.calls.append(item)
        return self.delay

    def forget(self, item: str) -> None:
        self.forgotten.append(item)

    def num_requeues(self, item: str) -> int:
        return self.requeues


def test_max_of_picks_the_largest_delay_and_consults_all() -> None:
    small, big = _Fixed(0.5, 3), _Fixed(2.0, 1)
    limiter: MaxOfRateLimiter[str] = MaxOfRateLimiter(small, big)
    assert limiter.when("a") == 2.0
    assert small.calls == big.calls == ["a"]
    assert limiter.num_requeues("a") == 3
    limiter.forget("a")
    assert small.forgotten == big.forgotten == ["a"]


def test_max_of_requires_a_limiter() -> None:
    with pytest.raises(ValueError, match="at least one"):
        MaxOfRateLimiter[str]()


def test_default_controller_rate_limiter_combines_backoff_and_bucket() -> None:
    clock = FakeClock()
    limiter: RateLimiter[str] = default_controller_rate_limiter(clock=clock)
    # Per-item backoff dominates while the bucket has tokens.
    assert [limiter.when("a") for _ in range(3)] == pytest.approx([0.005, 0.01, 0.02])
    assert limiter.num_requeues("a") == 3
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    # 97 tokens left: exhaust them with fresh items, then the bucket dominates.
    for i in range(97):
        assert limiter.when(f"fresh{i}") == pytest.approx(0.005)
    assert limiter.when("b") == pytest.approx(0.1)
    assert limiter.when("c") == pytest.approx(0.2)


def test_default_backoff_reaches_the_1000s_cap() -> None:
    limiter = default_controller_rate_limiter(clock=FakeClock())
    delays = [limiter.when("a") for _ in range(40)]
    assert max(delays) == 1000.0
    assert delays[-1] == 1000.0
