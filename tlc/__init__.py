"""tlc: 3LC gradient compression for TensorFlow parameter-server training.

`import tlc` is light; the TF parts load on first use.
"""
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
