"""Starts a setsid daemon that outlives grading and writes outside any temp folder."""

import os
import time

_MARK = os.environ.get("HOSTILE_DAEMON_FILE")

if _MARK and os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for beat in range(100_000):  # about three hours, unless it is killed
            try:
                with open(_MARK, "a") as mark:
                    mark.write(f"{os.getpid()} {beat}\n")
            except OSError:
                pass
            time.sleep(0.1)
    os._exit(0)


class Solution:
    def connect(self, root):
        return root
