"""tlc: 3LC gradient compression for TensorFlow parameter-server training.

`import tlc` is light; the TF parts load on first use.
"""
import importlib.util
import os
import sys


def _tensorflow_error(found):
    """The one line for a TensorFlow other than the ops' (found: its version,
    or None when there is none), or None when it is theirs or unknown: a
    checkout not built yet (its flag check runs before the set-up installs
    TensorFlow) or built before tlc/_build_info.py existed."""
    try:
        from tlc import _build_info  # pylint: disable=import-outside-toplevel
    except ImportError:
        return None
    built = f"tlc's ops were built for {_build_info.TF_DISTRIBUTION} {_build_info.TF_VERSION}"
    reinstall = f"pip install {_build_info.TF_DISTRIBUTION}=={_build_info.TF_VERSION}"
    if found is None:
        return f"{built}, and no TensorFlow is installed in {sys.prefix}: {reinstall}"
    if found == _build_info.TF_VERSION:
        return None
    if found.split(".")[:2] == _build_info.TF_VERSION.split(".")[:2]:
        source = _build_info.SOURCE if os.path.isdir(_build_info.SOURCE) else "<tlc checkout>"
        fix = f"pip install --force-reinstall --no-deps {source}"  # rebuild against this one
    else:
        fix = reinstall
    return f"{built}, but TensorFlow {found} is installed in {sys.prefix}: {fix}"


if importlib.util.find_spec("tensorflow") is None and _tensorflow_error(None):
    raise ImportError(_tensorflow_error(None))

# Before TensorFlow makes its first gRPC channel: see tlc/grpc_options.py.
from tlc import grpc_options as _grpc_options  # noqa: E402  pylint: disable=wrong-import-position
_grpc_options.apply()

_LAZY = {
    "SyncReplicasOptimizer": ("tlc.optimizer", "SyncReplicasOptimizer"),
    "ThreeLC": ("tlc.compressors.threelc", "ThreeLC"),
    "Float32": ("tlc.compressors.threelc", "Float32"),
    "balanced_placement": ("tlc.placement", "balanced"),
}
_SUBMODULES = ("placement",)  # `import tlc; tlc.placement.balanced(...)`


def __getattr__(name):
    if name in _LAZY:
        import importlib  # pylint: disable=import-outside-toplevel
        module, attr = _LAZY[name]
        return getattr(importlib.import_module(module), attr)
    if name in _SUBMODULES:
        import importlib  # pylint: disable=import-outside-toplevel
        return importlib.import_module(f"tlc.{name}")
    raise AttributeError(f"module 'tlc' has no attribute {name!r}")
