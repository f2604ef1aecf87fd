"""Imports TensorFlow without its start-up notices.

TF 2.21 writes two notices on import that TF_CPP_MIN_LOG_LEVEL does not
silence (they are logged before absl's logging is initialised): absl's
"All log messages before absl::InitializeLog()" warning and, on CPUs where
oneDNN is on, "oneDNN custom operations are on". Everything else TensorFlow
writes to stderr while importing is passed on unchanged, after the import.
"""
import os
import re
import sys
import tempfile

_NOTICES = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to "
    r"STDERR|I\d{4} [\d:. ]+\d+ port\.cc:\d+\] oneDNN custom operations are on\..*)$")


def drop_notices(text):
    """text without the start-up notices (whole lines only)."""
    return "".join(line for line in text.splitlines(keepends=True)
                   if not _NOTICES.match(line.rstrip("\n")))


def import_tensorflow():
    """Imports tensorflow with fd 2 captured, then writes back all but the notices.
    The main job's tasks never use Keras, but TF imports Keras 3's optimizers
    (and through them matplotlib.pyplot) on import unless told that its Keras
    is tf_keras, and then only if tf_keras is installed: telling it saves each
    task ~2 s of CPU at start (5.3 instead of 7.6 s on a 2-core EPYC). A value
    the user set is kept."""
    if "tensorflow" in sys.modules:
        return sys.modules["tensorflow"]
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            import tensorflow  # pylint: disable=import-outside-toplevel
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            rest = drop_notices(captured.read().decode("utf-8", errors="replace"))
            if rest:
                sys.stderr.write(rest)
                sys.stderr.flush()
    return tensorflow
