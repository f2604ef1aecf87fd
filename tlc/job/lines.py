"""Whole lines on stdout and stderr while threads print at once.

print() writes its text and its newline in two calls, so a line of one
thread (the watchdog's, the launcher's rate changes, its copy of the chief's
output) could land inside another's. In the job's processes each thread's
text is held until it ends a line, and whole lines go out in one write under
one lock, shared by stdout and stderr (often one pipe)."""
import sys
import threading

# Re-entrant: a signal handler that prints runs on a thread that may hold it.
_LOCK = threading.RLock()


class WholeLines:
    """A text stream that passes on whole lines only, one write each."""

    def __init__(self, stream):
        self.stream = stream
        self._held = threading.local()  # this thread's text since its last newline

    def write(self, text):
        held = getattr(self._held, "text", "") + text
        cut = held.rfind("\n") + 1
        self._held.text = held[cut:]
        if cut:
            with _LOCK:
                self.stream.write(held[:cut])
        return len(text)

    def flush(self):
        """Also passes on this thread's unfinished line: a flush asks for it."""
        held, self._held.text = getattr(self._held, "text", ""), ""
        with _LOCK:
            if held:
                self.stream.write(held)
            self.stream.flush()

    def __getattr__(self, name):  # fileno, isatty, encoding, buffer, ...
        return getattr(self.stream, name)


def install():
    """sys.stdout and sys.stderr pass on whole lines (once per process)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, WholeLines):
            setattr(sys, name, WholeLines(stream))
