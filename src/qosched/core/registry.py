"""Name -> class registries for plug-ins, one per level: cluster policies, GPU-sharing policies,
placement platforms.

Built-ins register with a class decorator when their module is imported. Other packages add
classes through entry points (``importlib.metadata``): the group a registry names, one entry
``NAME = module:Class`` per class, read once, when the registry is first asked for a name. A
plug-in that cannot be loaded, is not a conforming class, or takes a name already taken is left
out with a :class:`PluginWarning` naming it, and asking for it by name raises an
:class:`~qosched.core.errors.InputError` that says why; the built-ins keep working.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from qosched.core.errors import InputError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

T = TypeVar("T")


class PluginWarning(UserWarning):
    """An installed plug-in was left out (the message names it and says why)."""


@dataclass(frozen=True)
class PluginGroup:
    """Where a registry finds plug-ins: the entry-point ``group``, and what a loaded object
    must be: ``conforms(cls)`` on a class, described by ``expected`` in error messages."""

    group: str
    conforms: Callable[[type], bool]
    expected: str


class Registry(Generic[T]):
    """Classes registered by name with a decorator, and those of ``plugins``' entry points; a
    duplicate built-in name raises ValueError, an unknown name an InputError listing the known
    ones. ``what`` names the kind in messages, ``plural`` several of them; ``field`` is the
    input field an unknown name is reported on."""

    def __init__(
        self,
        what: str,
        plugins: PluginGroup | None = None,
        *,
        plural: str = "policies",
        field: str = "policy",
    ) -> None:
        self.what = what
        self.plugins = plugins
        self.plural = plural
        self.field = field
        self._factories: dict[str, type[T]] = {}
        self._broken: dict[str, str] = {}  # plug-in name -> why it was left out
        self._loaded = plugins is None

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
        """Built-ins in registration order, then plug-ins."""
        self._load_plugins()
        return tuple(self._factories)

    def create(self, name: str, **options: Any) -> T:
        """A new instance by registered name."""
        return self.get(name)(**options)

    def get(self, name: str, source: str | None = None) -> type[T]:
        """The class registered as ``name``, for a level whose classes are built otherwise than
        by calling them; an unknown name is an InputError on ``field`` of ``source``."""
        self._load_plugins()
        try:
            return self._factories[name]
        except KeyError:
            if name in self._broken:
                raise InputError(self._broken[name], source=source, field=self.field) from None
            broken = f"; plug-ins left out: {', '.join(self._broken)}" if self._broken else ""
            raise InputError(
                f"unknown {self.what} {name!r}; known {self.plural}: "
                f"{', '.join(self._factories)}{broken}",
                source=source,
                field=self.field,
            ) from None

    def _load_plugins(self) -> None:
        # Not at construction: a plug-in's module may import the module that builds this
        # registry, and the built-ins must be registered first so a clash is the plug-in's.
        if self._loaded:
            return
        self._loaded = True
        assert self.plugins is not None
        from importlib.metadata import entry_points

        found = sorted(entry_points(group=self.plugins.group), key=lambda e: (e.name, e.value))
        for entry in found:
            problem = self._add(entry)
            if problem is not None:
                message = f"{self._describe(entry)} {problem}"
                self._broken.setdefault(entry.name, message)
                warnings.warn(message, PluginWarning, stacklevel=3)

    def _add(self, entry: EntryPoint) -> str | None:
        """Register one entry point's class; what is wrong with it, or None."""
        assert self.plugins is not None
        taken = f"is left out: the name {entry.name!r} is taken by another {self.what}"
        if entry.name in self._factories:
            return taken
        try:
            loaded = entry.load()
        except Exception as exc:  # whatever the plug-in's import raises, the built-ins go on
            return f"cannot be loaded: {type(exc).__name__}: {exc}"
        if not isinstance(loaded, type) or not self.plugins.conforms(loaded):
            return f"is left out: it is {loaded!r}, expected {self.plugins.expected}"
        current = self._factories.get(entry.name)
        if current is not None:
            # Its module may have used the decorator itself while being loaded.
            return None if current is loaded else taken
        loaded.name = entry.name
        self._factories[entry.name] = loaded
        return None

    def _describe(self, entry: EntryPoint) -> str:
        dist = entry.dist
        origin = f" of {dist.name} {dist.version}" if dist is not None else ""
        return (
            f"{self.what} plug-in {entry.name!r} (entry point {entry.value!r} in group "
            f"{entry.group!r}{origin})"
        )
