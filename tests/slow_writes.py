"""A child's prelude that makes every write to one of its streams slow: a
line written in two parts (text, then newline) then has another thread's
line land between them, whatever the machine's speed."""


def prelude(stream, seconds):
    """Python source: sys.<stream> flushes and sleeps `seconds` after each write."""
    return (
        "import sys as _sys, time as _time\n"
        "class _Slow:\n"
        "    def __init__(self, f): self._f = f\n"
        "    def write(self, s):\n"
        f"        n = self._f.write(s); self._f.flush(); _time.sleep({seconds!r}); return n\n"
        "    def __getattr__(self, name): return getattr(self._f, name)\n"
        f"_sys.{stream} = _Slow(_sys.{stream})\n")
