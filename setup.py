"""Builds tlc: the numpy codec module (pybind11) and the TF op library.

Both compile the same C++ core in custom_ops/core. The TF op library uses
exactly TensorFlow's own compile and link flags (tf.sysconfig), so it matches
the installed TensorFlow's C++ ABI. Build in place for development with
`python setup.py build_ext --inplace`, or install with `pip install .`.

Which TensorFlow: the one already installed in the environment tlc goes into
(tensorflow, tensorflow-cpu, a GPU build: any distribution of the pinned
TensorFlow's minor version) when there is one; tlc then requires no other.
Otherwise the pin of requirements.txt, needed both to build and to run. The
TensorFlow the ops were compiled against is recorded in tlc/_build_info.py;
tlc checks it at import. pip builds with the project's own build/ directory:
the extensions always compile again (never a library left there by an
earlier build against another TensorFlow).

Every object file of both extensions compiles at once on all cores, with one
progress line per file on stderr ("setup: [3/17] compiling ...") and, every
TLC_PROGRESS_SECS seconds (default 30), one line naming the files still
compiling.
"""
import concurrent.futures
import glob
import json
import os
import re
import subprocess
import sys
import threading
import time

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

CORE_SOURCES = sorted(glob.glob("custom_ops/core/*.cc"))
# Per op family (codec, accumulator, message): <family>_ops.cc registers the
# ops, <family>_kernels.cc holds their kernels.
TF_SOURCES = sorted(glob.glob("custom_ops/tf/*_ops.cc") + glob.glob("custom_ops/tf/*_kernels.cc"))
# -ffp-contract=off: no fused multiply-add, so every build computes the same
# float32 error and decoded values (workers must match the server bit for bit).
COMMON_FLAGS = ["-O3", "-ffp-contract=off", "-fno-math-errno", "-Wall", "-Wno-sign-compare"]
OPS_LIBRARY = "tlc._tlc_ops"
HERE = os.path.dirname(os.path.abspath(__file__))


def pinned_tensorflow():
    """requirements.txt's TensorFlow requirement, e.g. "tensorflow-cpu==2.21.0"."""
    with open(os.path.join(HERE, "requirements.txt"), encoding="utf-8") as f:
        pins = [line.split("#")[0].strip() for line in f]
    (pin,) = [p for p in pins if re.match(r"tensorflow(-cpu)?==", p)]
    return pin


def minor_version(version):
    return ".".join(version.split(".")[:2])


# A child interpreter without pip's build-isolation variables sees the
# packages of the environment tlc is installed into (pip hides them from the
# build's own interpreter). It lists distributions, it imports nothing.
_FIND_TENSORFLOW = """
import json, re
from importlib import metadata
found = []
for dist in metadata.distributions():
    top = (dist.read_text("top_level.txt") or "").split()
    if "tensorflow" in top or (not top and any(str(f) == "tensorflow/__init__.py"
                                               for f in dist.files or ())):
        found.append([re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower(), dist.version])
print(json.dumps(found))
"""
# The flags to compile against the TensorFlow of that environment.
_TENSORFLOW_FLAGS = """
import json, os
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf
print(json.dumps([tf.version.VERSION, tf.sysconfig.get_compile_flags(),
                  tf.sysconfig.get_link_flags()]))
"""


def _in_target_environment(program):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONNOUSERSITE")}
    out = subprocess.run([sys.executable, "-c", program], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def installed_tensorflow():
    """(distribution, version) of the TensorFlow in the environment tlc is
    installed into, or None. Stops the build on a TensorFlow of another
    minor version than the pin: the ops are written for that one, and
    pulling in the pinned one would install a second TensorFlow over it."""
    found = _in_target_environment(_FIND_TENSORFLOW)
    if not found:
        return None
    name, version = found[0]
    pin = pinned_tensorflow()
    wanted = minor_version(pin.split("==")[1])
    if minor_version(version) != wanted:
        sys.exit(f"tlc: this environment has {name} {version}; tlc's ops are built for "
                 f"TensorFlow {wanted}.x: upgrade it (pip install {name}=={pin.split('==')[1]}) "
                 "or install tlc into an environment without TensorFlow")
    return name, version


TARGET_TENSORFLOW = installed_tensorflow()


def tensorflow_to_build_against():
    """(distribution, version, compile flags, link flags): the target
    environment's TensorFlow if it has one, else the pinned one that pip put in
    the build environment (and that tlc then requires)."""
    if TARGET_TENSORFLOW:
        version, compile_flags, link_flags = _in_target_environment(_TENSORFLOW_FLAGS)
        return TARGET_TENSORFLOW[0], version, compile_flags, link_flags
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # no start-up notices
    try:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
    except ImportError:
        sys.exit(f"tlc: building the ops needs TensorFlow ({pinned_tensorflow()}); "
                 f"pip install {pinned_tensorflow()}, or build with plain `pip install .`")
    return (pinned_tensorflow().split("==")[0], tf.version.VERSION,
            tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags())


class BuildExt(build_ext):
    """Adds pybind11 / TensorFlow flags to the two extensions and compiles
    all their object files in parallel."""

    def finalize_options(self):
        super().finalize_options()
        self.force = True  # a library left in build/ may be for another TensorFlow

    def build_extensions(self):
        self.check_extensions_list(self.extensions)
        self._say_lock = threading.Lock()  # not _lock: compile_one says its line holding that
        self._set_flags()
        self._todo = sum(len(ext.sources) for ext in self.extensions)
        self._done = 0
        self._lock = threading.Lock()
        self._current = threading.local()  # the extension a build thread is building
        self._compiling = {}  # "compiling <source> (<extension>)" / "linking ..." -> start time
        self.compiler.compile = self._compile_in_parallel
        self.compiler.link_shared_object = self._link_with_progress
        # The op library's files first: its TensorFlow-heavy ones take longest.
        order = sorted(self.extensions, key=lambda e: e.name != OPS_LIBRARY)
        self._order = [e.name for e in order]
        self._queued = {name: threading.Event() for name in self._order}  # its objects are queued
        done = threading.Event()
        ticker = threading.Thread(target=self._still_compiling, args=(done,), daemon=True)
        ticker.start()
        try:
            with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 1) as objects, \
                    concurrent.futures.ThreadPoolExecutor(len(order)) as extensions:
                self._objects = objects
                for future in [extensions.submit(self.build_extension, e) for e in order]:
                    future.result()  # raises the first build error
        finally:
            done.set()
            ticker.join()

    def _say(self, what):
        """One progress line in one write: print() writes the text and its
        newline apart, and another thread's line could land between them."""
        with self._say_lock:
            sys.stderr.write(f"setup: {what}\n")
            sys.stderr.flush()

    def _still_compiling(self, done):
        """A line every TLC_PROGRESS_SECS while files compile or link: the build is alive."""
        interval = float(os.environ.get("TLC_PROGRESS_SECS", "30"))
        while not done.wait(interval):
            with self._lock:  # now after every start it lists: no "-0 s"
                now = time.monotonic()
                running = sorted(self._compiling.items(), key=lambda item: item[1])
            if running:
                names = "; ".join(f"{what} {now - started:.0f} s" for what, started in running)
                self._say(f"still {names}")

    def _link_with_progress(self, objects, output_filename, *args, **kwargs):
        what = f"linking {os.path.basename(output_filename)} ({self._current.name})"
        with self._lock:
            self._compiling[what] = time.monotonic()
        self._say(what)
        try:
            type(self.compiler).link_shared_object(self.compiler, objects, output_filename,
                                                   *args, **kwargs)
        finally:
            with self._lock:
                del self._compiling[what]

    def build_extension(self, ext):
        self._current.name = ext.name
        try:
            super().build_extension(ext)
        finally:
            self._queued[ext.name].set()  # the next extension never waits for a failed one

    def _compile_in_parallel(self, sources, output_dir=None, macros=None, include_dirs=None,
                             debug=0, extra_preargs=None, extra_postargs=None, depends=None):
        """CCompiler.compile, one object per pool thread. Objects go to a
        directory per extension: the two compile the same core sources with
        different flags."""
        cc = self.compiler
        output_dir = os.path.join(output_dir or "build", self._current.name)
        macros, objects, extra_postargs, pp_opts, build = cc._setup_compile(  # pylint: disable=protected-access
            output_dir, macros, include_dirs, sources, depends, extra_postargs)
        cc_args = cc._get_cc_args(pp_opts, debug, extra_preargs)  # pylint: disable=protected-access
        name = self._current.name

        def compile_one(obj):
            src, ext = build[obj]
            key = f"{src} ({name})"
            with self._lock:
                self._done += 1
                self._compiling[f"compiling {key}"] = time.monotonic()
                self._say(f"[{self._done}/{self._todo}] compiling {key}")
            try:
                cc._compile(obj, src, ext, cc_args, extra_postargs, pp_opts)  # pylint: disable=protected-access
            finally:
                with self._lock:
                    del self._compiling[f"compiling {key}"]

        position = self._order.index(name)
        if position > 0:  # queue after the extension before it
            self._queued[self._order[position - 1]].wait()
        todo = sorted((obj for obj in objects if obj in build),  # TensorFlow's headers first
                      key=lambda obj: not build[obj][0].startswith("custom_ops/tf/"))
        futures = [self._objects.submit(compile_one, obj) for obj in todo]
        self._queued[name].set()
        for future in futures:
            future.result()
        return objects

    def _set_flags(self):
        for ext in self.extensions:
            if ext.name == OPS_LIBRARY:
                distribution, version, compile_flags, link_flags = tensorflow_to_build_against()
                self._say(f"building the ops against {distribution} {version}")
                ext.extra_compile_args = (COMMON_FLAGS + compile_flags
                                          + ["-Wno-deprecated-declarations"])
                ext.extra_link_args = link_flags
                self._write_build_info(distribution, version)
            else:
                import pybind11

                ext.include_dirs.append(pybind11.get_include())
                ext.extra_compile_args = COMMON_FLAGS + ["-std=c++17", "-fvisibility=hidden"]
            ext.extra_link_args = list(ext.extra_link_args or []) + ["-pthread"]

    def _write_build_info(self, distribution, version):
        """tlc/_build_info.py beside the op library: the TensorFlow it links
        against, checked at import (tlc.check_tensorflow)."""
        path = os.path.join(os.path.dirname(self.get_ext_fullpath(OPS_LIBRARY)), "_build_info.py")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write('"""Written by setup.py when it built _tlc_ops.so."""\n'
                    f"TF_DISTRIBUTION = {distribution!r}\n"
                    f"TF_VERSION = {version!r}\n"
                    f"SOURCE = {HERE!r}\n")

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
    # testbed: the main job's --netem_rate runs its tasks behind its slow links.
    packages=find_packages(include=["tlc", "tlc.*", "testbed"]),
    ext_modules=[
        Extension("tlc._codec", CORE_SOURCES + ["custom_ops/python/codec_module.cc"],
                  language="c++"),
        Extension(OPS_LIBRARY, TF_SOURCES + CORE_SOURCES,
                  language="c++"),
    ],
    cmdclass={"build_ext": BuildExt},
    python_requires=">=3.9",
    # TensorFlow: needed to build (its headers) and to run, unless the target
    # environment has one already (a GPU build, say): then no second one.
    setup_requires=[] if TARGET_TENSORFLOW else [pinned_tensorflow()],
    install_requires=["numpy", "absl-py"] + ([] if TARGET_TENSORFLOW else [pinned_tensorflow()]),
)
