"""A tripwire on the modules a grade depends on: pytest, pluggy, the grader, the tests, builtins.

`Snapshot.take(modules)` records what each module's names (and the classes defined in them)
point to; `changes()` lists the names that point elsewhere now. The grading plugin takes one
after collection, before the solution is imported, and checks it after every test, so a
solution that swaps a test function's code, replaces the test module in `sys.modules`, or
patches pytest's reporting is caught. It is a tripwire, not a wall: code that patches and
restores between two checks is not seen (the runner's docstring says what else is out of reach).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from types import FunctionType, ModuleType

__all__ = ["Snapshot"]

MAX_CHANGES = 3  # named in the message
# Names pytest itself rebinds around every test: its assertion plugin's per-test hooks, and
# the warning filters `catch_warnings` installs.
VOLATILE = {"_pytest.assertion.util": {"_reprcompare", "_assertion_pass", "_config"},
            "warnings": {"filters", "_showwarnmsg_impl"}}


def _names(namespace: dict) -> dict[str, object]:
    return dict(namespace)  # the objects themselves, so no id is reused while we look


def _same(namespace: dict, names: dict[str, object], strict: bool) -> bool:
    """Every recorded name still points where it did (and, if `strict`, none was added)."""
    # Packages gain names legitimately (a submodule imported later, a lazy attribute), so only
    # the tests' own modules are strict: a name added there could shadow a builtin.
    if strict and namespace.keys() != names.keys():
        return False
    return all(name in namespace and namespace[name] is value for name, value in names.items())


@dataclass
class Snapshot:
    """Identities of every name in some modules and in the classes they define."""

    modules: dict[str, tuple[ModuleType, dict[str, object], bool]]
    classes: list[tuple[str, type, dict[str, object]]]
    functions: list[tuple[str, FunctionType, object]]

    @classmethod
    def take(cls, modules: list[ModuleType], strict: list[ModuleType]) -> Snapshot:
        """Record `modules` and `strict` ones (which may not gain names) and what they define."""
        recorded, classes, functions = {}, [], []
        for module in [*modules, *strict]:
            namespace = vars(module)
            names = {name: value for name, value in _names(namespace).items()
                     if name not in VOLATILE.get(module.__name__, ())}
            recorded[module.__name__] = (module, names, module in strict)
            for name, value in list(namespace.items()):
                where = f"{module.__name__}.{name}"
                if isinstance(value, type) and value.__module__ == module.__name__:
                    classes.append((where, value, _names(dict(vars(value)))))
                elif isinstance(value, FunctionType):
                    functions.append((where, value, value.__code__))
        return cls(recorded, classes, functions)

    def changes(self) -> list[str]:
        """What no longer points where it did (empty: nothing seen)."""
        found = []
        for name, (module, names, strict) in self.modules.items():
            if sys.modules.get(name) is not module:
                found.append(f"sys.modules[{name!r}]")
            if not _same(vars(module), names, strict):
                found.append(f"a name in {name}")
        for where, klass, names in self.classes:
            if not _same(dict(vars(klass)), names, strict=False):
                found.append(f"an attribute of {where}")
        for where, function, code in self.functions:
            if function.__code__ is not code:
                found.append(f"the code of {where}")
        return found[:MAX_CHANGES]
