"""Compressors registered by name; see base.py for the interface."""
from tlc.compressors.base import (  # noqa: F401
    Compressor,
    ErrorFeedback,
    create,
    names,
    local_variable,
    payload_bytes,
    register,
)
from tlc.compressors.threelc import Float32, ThreeLC  # noqa: F401
from tlc.compressors import aqgb, baselines, sbc, variance  # noqa: F401,E402  (registration)
from tlc import controller  # noqa: F401,E402  (registers 3lc_auto)
