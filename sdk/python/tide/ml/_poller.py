"""LROPoller: what begin_* operations return, as azure.core's poller."""

from __future__ import annotations

import time
from typing import Any, Callable, Optional, Tuple


class LROPoller:
    """Polls a long-running operation until it is done.

    ``poll`` returns ``(done, status, result)``; ``result()`` waits for it
    (raising the operation's error, e.g. a compute whose provisioning
    failed) and returns the final resource.
    """

    def __init__(self, poll: Callable[[], Tuple[bool, str, Any]], interval: float = 0.5) -> None:
        self._poll = poll
        self._interval = interval
        self._done, self._status, self._result = False, "InProgress", None

    def _update(self) -> None:
        if not self._done:
            self._done, self._status, self._result = self._poll()

    def done(self) -> bool:
        """Whether the operation has finished."""
        self._update()
        return self._done

    def status(self) -> str:
        """The operation's last known status (e.g. a compute's provisioning state)."""
        self._update()
        return self._status

    def wait(self, timeout: Optional[float] = None) -> None:
        """Waits up to timeout seconds (forever when None)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.done():
            if deadline is not None and time.monotonic() >= deadline:
                return
            time.sleep(self._interval)

    def result(self, timeout: Optional[float] = None) -> Any:
        """Waits for the operation and returns its final resource."""
        self.wait(timeout)
        if not self._done:
            raise TimeoutError("the operation did not finish in %ss (status %s)" % (timeout, self._status))
        return self._result
