"""Rate limiters: client-go default_rate_limiters.go semantics."""

from __future__ import annotations

import pytest

from mlops_platform.runtime.clock import FakeClock
from mlops_platform.runtime.queue.ratelimiter import (
    Backoff,
    BucketRateLimiter,
    Exponential,
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
    with pytest.raises(ValueError, match=">= 0"):
        Exponential(1.0, 1.0, jitter=-0.5)


@pytest.mark.parametrize(
    ("rand", "expected"),
    [(0.0, [0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0]), (0.5, [1.2, 2.4, 4.8, 9.6, 19.2, 30.0, 30.0])],
    ids=["no-jitter-drawn", "half-jitter"],
)
def test_exponential_jitter_adds_a_share_of_the_delay_and_stays_capped(
    rand: float, expected: list[float]
) -> None:
    backoff = Exponential(0.8, 30.0, jitter=1.0, rand=lambda: rand)
    assert [backoff.delay(n) for n in range(7)] == pytest.approx(expected)
    assert backoff.delay(10**30) == 30.0


def test_backoff_grows_caps_and_resets_after_a_healthy_period_on_the_clock() -> None:
    clock = FakeClock()
    b = Backoff(0.8, 30.0, reset_after=120.0, clock=clock)
    delays = [b.next_delay()]
    for _ in range(7):
        clock.step(delays[-1])  # the retry fails again right after its wait
        delays.append(b.next_delay())
    assert delays == pytest.approx([0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30.0, 30.0])
    clock.step(120.0)  # exactly reset_after since the last failure: still the same run of failures
    assert b.next_delay() == 30.0
    clock.step(120.1)
    assert b.next_delay() == 0.8
    assert b.next_delay() == 1.6


def test_backoff_jitter_is_drawn_per_delay() -> None:
    draws = iter([1.0, 0.0, 0.25])
    b = Backoff(1.0, 30.0, jitter=1.0, reset_after=60.0, clock=FakeClock(), rand=lambda: next(draws))
    assert [b.next_delay() for _ in range(3)] == pytest.approx([2.0, 2.0, 5.0])


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
