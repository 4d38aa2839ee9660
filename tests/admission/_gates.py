"""A Python gate that passes every call on to an `AdmissionController` (so the loop reaches
the compiled gate through the bridge); tests subclass it to watch or override decisions."""

from __future__ import annotations

from refimpl.admission import AdmissionController, Gate


class PassingOn(Gate):
    """Every decision is `inner`'s."""

    passes_everything = False

    def __init__(self, inner: AdmissionController | None = None) -> None:
        self.inner = inner or AdmissionController()

    def bind(self, ctx):
        self.ctx = ctx
        self.inner.bind(ctx)

    @property
    def counts(self):
        return self.inner.counts

    def on_arrival(self, i, now_s):
        return self.inner.on_arrival(i, now_s)

    def poll(self, now_s):
        return self.inner.poll(now_s)

    def observe(self, plan, finished, duration_s, now_s):
        self.inner.observe(plan, finished, duration_s, now_s)

    def num_queued(self):
        return self.inner.num_queued()
