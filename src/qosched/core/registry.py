"""Name -> constructor registries for plug-ins (cluster policies, GPU-sharing policies)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from qosched.core.errors import InputError

T = TypeVar("T")


class Registry(Generic[T]):
    """Classes registered by name with a decorator; a duplicate name raises ValueError, an
    unknown name an InputError listing the known ones. ``what`` names the kind in messages."""

    def __init__(self, what: str) -> None:
        self.what = what
        self._factories: dict[str, Callable[..., T]] = {}

    def register(self, name: str) -> Callable[[type], type]:
        """Class decorator: make the class constructible by ``name`` (set as ``cls.name``)."""

        def decorator(cls: type) -> type:
            if name in self._factories:
                raise ValueError(f"{self.what} {name!r} is already registered")
            cls.name = name
            self._factories[name] = cls
            return cls

        return decorator

    def names(self) -> tuple[str, ...]:
        return tuple(self._factories)

    def create(self, name: str, **options: Any) -> T:
        """A new instance by registered name."""
        try:
            factory = self._factories[name]
        except KeyError:
            raise InputError(
                f"unknown {self.what} {name!r}; known policies: {', '.join(self.names())}",
                field="policy",
            ) from None
        return factory(**options)
