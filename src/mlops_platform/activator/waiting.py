"""Where the activator holds requests until their Service has a ready endpoint (no I/O).

Contract:
- :meth:`Room.set_ready` is told a Service's ready endpoints (``ip:port``, from its EndpointSlices)
  whenever they change; the requests waiting for it are released the moment there is one;
- :meth:`Room.endpoint` returns a ready endpoint of the Service at once when it has one (round-robin
  over them), else holds the caller until it has or until ``timeout`` (:class:`NotReady`, saying how
  long it waited); a cancelled caller is no longer counted;
- :meth:`Room.held` is how many requests wait for a Service now: what KEDA's trigger reads to wake it
  (any held request activates it).
"""

from __future__ import annotations

import asyncio
import collections
import itertools
from collections.abc import Iterable, Iterator

from mlops_platform.activator.target import Target


class NotReady(TimeoutError):
    """The Service had no ready endpoint within the hold time."""


class Room:
    def __init__(self) -> None:
        self._ready: dict[Target, tuple[str, ...]] = {}
        self._turns: dict[Target, Iterator[int]] = {}
        self._changed: dict[Target, asyncio.Event] = collections.defaultdict(asyncio.Event)
        self._held: collections.Counter[Target] = collections.Counter()

    def set_ready(self, target: Target, endpoints: Iterable[str]) -> None:
        ready = tuple(sorted(set(endpoints)))
        if ready == self._ready.get(target, ()):
            return
        if ready:
            self._ready[target] = ready
        else:
            self._ready.pop(target, None)
        event = self._changed.pop(target, None)
        if event is not None:  # wake every waiter; each looks again
            event.set()

    def ready(self, target: Target) -> tuple[str, ...]:
        return self._ready.get(target, ())

    def held(self, target: Target) -> int:
        return self._held[target]

    def _pick(self, target: Target) -> str:
        ready = self._ready[target]
        turn = next(self._turns.setdefault(target, itertools.count()))
        return ready[turn % len(ready)]

    async def endpoint(self, target: Target, timeout: float) -> str:
        """A ready endpoint of ``target``, waiting up to ``timeout`` seconds for one."""
        if target in self._ready:
            return self._pick(target)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        self._held[target] += 1
        try:
            while target not in self._ready:
                left = deadline - loop.time()
                if left <= 0:
                    raise NotReady(f"{target} had no ready endpoint within {timeout:g}s")
                try:
                    await asyncio.wait_for(self._changed[target].wait(), left)
                except TimeoutError:
                    continue  # the loop says so
            return self._pick(target)
        finally:
            self._held[target] -= 1
            if not self._held[target]:  # nobody waits for it now: forget its count and its event
                del self._held[target]
                self._changed.pop(target, None)
