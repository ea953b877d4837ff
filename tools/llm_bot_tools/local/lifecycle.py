"""One ``with`` protocol for the local services: entering starts, leaving stops."""

from __future__ import annotations

from abc import ABC, abstractmethod
from types import TracebackType
from typing import Self


class LocalService(ABC):
    """A process or thread the local stack runs; ``stop`` must be safe to call twice."""

    @abstractmethod
    def start(self) -> Self: ...

    @abstractmethod
    def stop(self) -> None: ...

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
