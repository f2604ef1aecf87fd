"""Offline stand-in for rules_java: forwards to Bazel's built-in Java rules
(bazel_tools loads these names; tlc itself builds no Java)."""

java_binary = native.java_binary
java_import = native.java_import
java_library = native.java_library
java_proto_library = native.java_proto_library
java_runtime = native.java_runtime
java_toolchain = native.java_toolchain
