"""The channel from a grading child to the grader: signed, numbered events the parent judges.

The child writes one JSON line per event to a pipe the parent opened for it; each line carries
a sequence number and an HMAC under a key the parent made for that run and handed over on the
child's standard input, before any solution code ran. `Judge`, in the parent, accepts only
lines that verify, in sequence, and that tell a consistent story: tests start one at a time in
the collected order, each gets one result, and a failure once sent is final. Anything else is
tampering, and the grade is then zero (see the runner's docstring for what this does and does
not stop).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from dataclasses import dataclass, field

__all__ = ["KEY_BYTES", "Judge", "Tampered", "signer"]

KEY_BYTES = 32
MAX_LINE_BYTES = 4 << 20  # far above any honest event (the test list is a few KiB)


class Tampered(Exception):
    """The child's events did not verify or did not make sense: its results are void."""


def _mac(key: bytes, seq: int, body: str) -> str:
    return hmac.new(key, f"{seq}\n{body}".encode(), hashlib.sha256).hexdigest()


def signer(key: bytes, fd: int, first_seq: int = 0):
    """A function `send(**event)` that writes signed, numbered events to the file `fd`."""
    counter = [first_seq]

    def send(**event: object) -> None:
        body = json.dumps(event, sort_keys=True)
        line = json.dumps({"seq": counter[0], "body": body,
                           "mac": _mac(key, counter[0], body)}) + "\n"
        counter[0] += 1
        data = line.encode()
        while data:  # a line longer than the pipe's buffer arrives in parts
            data = data[os.write(fd, data):]

    return send


@dataclass
class Judge:
    """Verifies events and keeps what they establish, across the children of one grading."""

    key: bytes
    seq: int = 0
    tests: list[dict] = field(default_factory=list)  # from the first "collected" event
    results: dict[str, tuple[bool, str]] = field(default_factory=dict)  # nodeid -> outcome
    failures: dict[str, str] = field(default_factory=dict)  # nodeid -> first failure message
    collect_error: str = ""
    running: str | None = None
    pending: str | None = None  # the last result, until the child goes on past it
    finished: bool = False  # this child said its session ended
    _buffer: bytes = b""

    def feed(self, data: bytes) -> None:
        """Take in bytes from the pipe; raise `Tampered` at the first bad event."""
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        if len(self._buffer) > MAX_LINE_BYTES:  # a flood without line ends: not ours
            raise Tampered(f"an event longer than {MAX_LINE_BYTES} bytes")
        for line in lines:
            self._take(self._verify(line))

    def new_child(self) -> None:
        """A fresh child starts numbering again; what was running died with the last one."""
        self.seq, self.running, self.pending, self.finished, self._buffer = (
            0, None, None, False, b"")

    def child_ended(self, death: str) -> None:
        """Charge the test the child died in (`death` says how), or the result it stopped at."""
        if self.running is not None:
            self.results[self.running] = (False, death)
        elif self.pending is not None:
            self.results[self.pending] = (
                False, "the test process ended right after this test, before the next began")
        self.running = self.pending = None

    def _verify(self, line: bytes) -> dict:
        try:
            envelope = json.loads(line)
            seq, body, mac = envelope["seq"], envelope["body"], envelope["mac"]
            if not (isinstance(seq, int) and isinstance(body, str) and isinstance(mac, str)):
                raise TypeError("wrong types")
        except (ValueError, TypeError, KeyError) as error:
            raise Tampered(f"an unreadable event ({error})") from None
        if seq != self.seq or not hmac.compare_digest(mac, _mac(self.key, seq, body)):
            raise Tampered(f"event {seq} does not verify (expected event {self.seq})")
        self.seq += 1
        return json.loads(body)

    def _next_test(self) -> str | None:
        return next((t["nodeid"] for t in self.tests if t["nodeid"] not in self.results), None)

    def _take(self, event: dict) -> None:
        kind, nodeid = event.get("event"), event.get("nodeid")
        if self.finished:
            raise Tampered(f"a {kind} after the session finished")
        if kind == "collected":
            if not self.tests:
                self.tests = event["tests"]
        elif kind == "collect_error":
            self.collect_error = str(event["message"])
        elif kind == "start":
            if self.running is not None or nodeid != self._next_test():
                raise Tampered(f"{nodeid} started out of turn")
            self.running, self.pending = nodeid, None
        elif kind in ("failed", "result"):
            if nodeid is None or nodeid != self.running:
                raise Tampered(f"a {kind} for {nodeid}, which is not running")
            if kind == "failed":
                self.failures.setdefault(nodeid, str(event["message"]))
            else:
                passed = event["passed"] is True and nodeid not in self.failures
                self.results[nodeid] = (passed, "" if passed else self.failures.get(
                    nodeid, str(event["message"]) or "failed"))
                self.running, self.pending = None, nodeid
        elif kind == "finished":
            self.finished, self.pending = True, None
        elif kind == "tampered":
            raise Tampered(str(event.get("message")))
        else:
            raise Tampered(f"an unknown event {kind!r}")
