"""Every engine test runs on both engines: the Python reference and the compiled one.

`make_engine` here wraps the shared fixture: the "compiled" run builds the same engine, then
hands its policy, executor and KV cache to `CompiledEngine`; a policy the compiled engine does
not implement (the seed's scheduler, a user's class) skips there.
"""

from __future__ import annotations

import pytest


@pytest.fixture(params=["python", "compiled"])
def make_engine(request, make_engine):
    """`make_engine` of tests/conftest.py, once per engine."""
    if request.param == "python":
        return make_engine
    from refimpl.engine.compiled import CompiledEngine, supports

    def build(*args, **kwargs):
        engine = make_engine(*args, **kwargs)
        if not supports(engine.policy, engine.executor):
            pytest.skip(f"the compiled engine does not run {engine.policy.name!r}")
        return CompiledEngine(engine.policy, engine.executor, engine.kv, engine.model)

    return build
