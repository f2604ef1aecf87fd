// Op definitions of the step message (format: custom_ops/core/message.h,
// docs/FORMAT.md). Kernels are in message_kernels.cc, Python wrappers in
// tlc/message.py.
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tlc {

using ::tensorflow::shape_inference::InferenceContext;

REGISTER_OP("TlcPackMessage")
    .Input("parts: N * uint8")
    .Attr("N: int >= 0")
    .Output("message: uint8")
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
      return ::absl::Status();
    });

REGISTER_OP("TlcUnpackMessage")
    .Input("message: uint8")
    .Attr("num_parts: int >= 0")
    .Attr("what: string")
    // Optional, empty or one entry per part (core/message.h, CheckPartSizes):
    // a part's exact byte count (-1: any) and its value size.
    .Attr("part_bytes: list(int) = []")
    .Attr("item_bytes: list(int) = []")
    .Output("parts: num_parts * uint8")
    .SetShapeFn([](InferenceContext* c) {
      for (int i = 0; i < c->num_outputs(); ++i) {
        c->set_output(i, c->Vector(InferenceContext::kUnknownDim));
      }
      return ::absl::Status();
    });

}  // namespace tlc
