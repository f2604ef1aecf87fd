"""Builds tlc: the numpy codec module (pybind11) and the TF op library.

Both compile the same C++ core in custom_ops/core. The TF op library uses
exactly TensorFlow's own compile and link flags (tf.sysconfig), so it matches
the installed TensorFlow's C++ ABI. Build in place for development with
`python setup.py build_ext --inplace`, or install with
`pip install --no-build-isolation .`.
"""
import glob
import os

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

CORE_SOURCES = sorted(glob.glob("custom_ops/core/*.cc"))
# -ffp-contract=off: no fused multiply-add, so every build computes the same
# float32 error and decoded values (workers must match the server bit for bit).
COMMON_FLAGS = ["-O3", "-ffp-contract=off", "-fno-math-errno", "-Wall", "-Wno-sign-compare"]
OPS_LIBRARY = "tlc._tlc_ops"


class BuildExt(build_ext):
    """Adds pybind11 / TensorFlow flags to the two extensions."""

    def build_extensions(self):
        for ext in self.extensions:
            if ext.name == OPS_LIBRARY:
                import tensorflow as tf  # only needed for the op library

                ext.extra_compile_args = (COMMON_FLAGS + tf.sysconfig.get_compile_flags()
                                          + ["-Wno-deprecated-declarations"])
                ext.extra_link_args = tf.sysconfig.get_link_flags()
            else:
                import pybind11

                ext.include_dirs.append(pybind11.get_include())
                ext.extra_compile_args = COMMON_FLAGS + ["-std=c++17", "-fvisibility=hidden"]
            ext.extra_link_args = list(ext.extra_link_args or []) + ["-pthread"]
        super().build_extensions()

    def get_ext_filename(self, ext_name):
        # tf.load_op_library wants a plain shared library with a fixed name.
        parts = ext_name.split(".")
        if parts[-1] == OPS_LIBRARY.split(".")[-1]:
            return os.path.join(*parts) + ".so"
        return super().get_ext_filename(ext_name)


setup(
    name="tlc",
    version="0.1.0",
    description="3LC gradient compression for TensorFlow parameter-server training",
    packages=find_packages(include=["tlc", "tlc.*"]),
    ext_modules=[
        Extension("tlc._codec", CORE_SOURCES + ["custom_ops/python/codec_module.cc"],
                  language="c++"),
        Extension(OPS_LIBRARY, CORE_SOURCES + ["custom_ops/tf/ops.cc", "custom_ops/tf/kernels.cc"],
                  language="c++"),
    ],
    cmdclass={"build_ext": BuildExt},
    python_requires=">=3.9",
    install_requires=["numpy", "absl-py"],
    extras_require={"tf": ["tensorflow-cpu==2.21.0"]},
)
