"""A clock tests move by hand (``clock.now += 61``), for caches that read ``time.monotonic``."""

from __future__ import annotations


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now
