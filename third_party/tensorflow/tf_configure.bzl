"""Repository rule: the installed TensorFlow's headers, library and flags."""

_QUERY = """
import json, tensorflow as tf
print(json.dumps({"compile": tf.sysconfig.get_compile_flags(), "link": tf.sysconfig.get_link_flags()}))
"""

def _tf_configure_impl(ctx):
    python = ctx.os.environ.get("PYTHON_BIN_PATH", "python3")
    result = ctx.execute([python, "-c", _QUERY], environment = {"TF_CPP_MIN_LOG_LEVEL": "3"})
    if result.return_code != 0:
        fail("cannot read tf.sysconfig with %s: %s" % (python, result.stderr))
    flags = json.decode(result.stdout.strip().splitlines()[-1])
    include_dir = [f[2:] for f in flags["compile"] if f.startswith("-I")][0]
    if not [f for f in flags["link"] if f.startswith("-l:")]:
        fail("tf.sysconfig.get_link_flags() has no -l:libtensorflow_framework flag: %s" % flags["link"])

    # Compile flags as TF gives them (C++ standard, _GLIBCXX_USE_CXX11_ABI, ...),
    # minus the include dir, which becomes the tf_headers target.
    copts = [f for f in flags["compile"] if not f.startswith("-I")]
    ctx.symlink(include_dir, "include")
    ctx.file("flags.bzl", "TF_COPTS = %s\n" % repr(copts))
    ctx.file("BUILD", """
package(default_visibility = ["//visibility:public"])

cc_library(
    name = "tf_headers",
    hdrs = glob(["include/**/*.h", "include/**/*.inc", "include/Eigen/**", "include/unsupported/**",
                 "include/absl/**", "include/google/**", "include/third_party/**", "include/tsl/**",
                 "include/xla/**"], exclude_directories = 1),
    includes = ["include"],
)

# Linked with TF's own flags: -L<tensorflow dir> -l:libtensorflow_framework.so.2.
cc_library(
    name = "tf_framework",
    linkopts = %s,
)
""" % repr(flags["link"]))

tf_configure = repository_rule(
    implementation = _tf_configure_impl,
    environ = ["PYTHON_BIN_PATH"],
    local = True,
)
