"""3LC (and the uncompressed float32 baseline) as compressors."""
import numpy as np
import tensorflow as tf

from tlc import ops
from tlc.compressors.base import Compressor, Knob, register

_BELOW_TWO = float(np.nextafter(np.float32(2), np.float32(0)))  # largest float32 s < 2


@register("float32")
class Float32(Compressor):
    """No compression: the payload is the tensor itself (any float dtype)."""

    lossless = True

    def compress(self, x, memory=None):
        return (tf.identity(x),)

    def decompress(self, payload, num_elements):
        return payload[0]

    def accumulate(self, base, payload):
        return base + payload[0]


SCALINGS = ("tensor", "block")
DEFAULT_BLOCK_SIZE = 1000


@register("3lc")
class ThreeLC(Compressor):
    """3-value quantization, sparsity multiplier s in [1, 2), error feedback.

    `scaling`: "block" (default) takes m = s * max|x + e| per block of
    `block_size` consecutive values (a multiple of 5), one float32 scale per
    block on the wire; "tensor" takes it over the whole tensor (the 3LC
    paper's), which stops large tensors training at s >= 1.75
    (docs/RESULTS.md).
    `adaptive` (default) lets each tensor and step pick the smaller of the
    zero-run and the Golomb/sign encodings (docs/FORMAT.md).
    """

    uses_memory = True

    def __init__(self, sparsity_multiplier=1.0, adaptive=True, scaling="block",
                 block_size=DEFAULT_BLOCK_SIZE):
        s = float(sparsity_multiplier)
        if not 1.0 <= s < 2.0:
            raise ValueError(f"3lc: sparsity_multiplier must be in [1, 2), got {s}")
        if scaling not in SCALINGS:
            raise ValueError(f"3lc: scaling must be one of {', '.join(SCALINGS)}, got {scaling!r}")
        if scaling == "block" and not (isinstance(block_size, int) and block_size > 0
                                       and block_size % 5 == 0 and block_size <= 2**30):
            raise ValueError(f"3lc: block_size must be a positive multiple of 5, got {block_size!r}")
        self.sparsity_multiplier = s
        self.adaptive = bool(adaptive)
        self.scaling = scaling
        self.block_size = block_size if scaling == "block" else 0  # 0: the op's per-tensor mode

    def _compress(self, x, memory, s):
        options = dict(adaptive=self.adaptive, block_size=self.block_size)
        if memory is None:
            code, m, _ = ops.compress_3lc(x, tf.zeros_like(x), s, **options)
            return code, m
        return ops.compress_3lc(x, memory, s, **options)

    def compress(self, x, memory=None):
        return self._compress(x, memory, self.sparsity_multiplier)

    def decompress(self, payload, num_elements):
        code, m = payload
        return ops.decompress_3lc(code, m, num_elements, adaptive=self.adaptive,
                                  block_size=self.block_size)

    def accumulate(self, base, payload):
        code, m = payload
        return ops.decompress_3lc_accumulate(base, code, m, adaptive=self.adaptive,
                                             block_size=self.block_size)

    def _options(self):
        block = f", block={self.block_size}" if self.block_size else ""
        return f"{block}{', zre' if not self.adaptive else ''}"

    def describe(self):
        return f"3lc(s={self.sparsity_multiplier:g}{self._options()})"


@register("3lc_auto")
class ControlledThreeLC(ThreeLC):
    """3LC whose s is read every step from `knob` (SparsityController's
    choice), clamped to [1, 2). Pulls use the fixed sparsity_multiplier."""

    def __init__(self, sparsity_multiplier=1.0, adaptive=True, scaling="block",
                 block_size=DEFAULT_BLOCK_SIZE):
        super().__init__(sparsity_multiplier, adaptive, scaling, block_size)
        self.knob = None

    def make_memory(self, num_elements, name):
        if self.knob is None:  # one s for every tensor, on the first sender's host
            self.knob = Knob(self.sparsity_multiplier, "tlc_3lc_sparsity_knob")
        return super().make_memory(num_elements, name)

    def compress(self, x, memory=None):
        if memory is None:
            return super().compress(x)
        return self._compress(x, memory, tf.clip_by_value(self.knob.value, 1.0, _BELOW_TWO))

    def describe(self):
        return f"3lc_auto(s0={self.sparsity_multiplier:g}{self._options()})"

