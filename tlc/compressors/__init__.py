"""Compressors registered by name; see base.py for the interface."""
from tlc.compressors.base import (  # noqa: F401
    Compressor,
    Knob,
    ErrorFeedback,
    create,
    names,
    local_variable,
    payload_bytes,
    register,
)
from tlc.compressors.threelc import ControlledThreeLC, Float32, ThreeLC  # noqa: F401
from tlc.compressors import aqgb, baselines, sbc, variance  # noqa: F401,E402  (registration)
