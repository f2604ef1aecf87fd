"""3LC codecs on numpy arrays, without TensorFlow.

Same functions and the same bytes as tlc.ops; the format is docs/FORMAT.md.
`num_threads=0` uses every core.
"""
from tlc._codec import (  # noqa: F401  (re-exported API)
    compress_3lc,
    decompress_3lc,
    decompress_3lc_accumulate,
    golomb_bstar,
    golomb_decode,
    golomb_encode,
    pack_base3,
    unpack_base3,
    zre_decode,
    zre_encode,
)

__all__ = [
    "compress_3lc",
    "decompress_3lc",
    "decompress_3lc_accumulate",
    "golomb_bstar",
    "golomb_decode",
    "golomb_encode",
    "pack_base3",
    "unpack_base3",
    "zre_decode",
    "zre_encode",
]
