// Op definitions of the step message (format: custom_ops/core/message.h,
// docs/FORMAT.md). Kernels are in message_kernels.cc, Python wrappers in
// tlc/message.py.
#include <string>
#include <vector>

#include "../core/message.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tlc {

using ::tensorflow::shape_inference::InferenceContext;

namespace {

// A graph asking for more parts than a message can hold fails when it is
// built (the kernels check again, for graphs made without shape inference).
::absl::Status CheckParts(int64_t parts, const std::string& what) {
  if (parts <= static_cast<int64_t>(message::kMaxParts)) return ::absl::Status();
  return ::absl::InvalidArgumentError(
      "tlc: " + what + "a step message holds at most " + std::to_string(message::kMaxParts) +
      " parts, got " + std::to_string(parts));
}

}  // namespace

REGISTER_OP("TlcPackMessage")
    // Each part as it is in memory (numeric or bool, any shape, row-major): no
    // reshape or bitcast before it (a node per part and step on the sender).
    .Input("parts: T")
    .Attr("T: list(type) >= 0")
    .Output("message: uint8")
    .SetShapeFn([](InferenceContext* c) {
      TF_RETURN_IF_ERROR(CheckParts(c->num_inputs(), ""));
      c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
      return ::absl::Status();
    });

REGISTER_OP("TlcUnpackMessage")
    .Input("message: uint8")
    // Each part's dtype (numeric or bool: its bytes as in memory, little-endian;
    // a bool byte is true unless 0) and, optionally, its shape (one entry per
    // part; an unknown shape: a vector of however many values the part holds).
    .Attr("out_types: list(type) >= 0")
    .Attr("shapes: list(shape) = []")
    .Attr("what: string")
    // Optional, empty or one entry per part (core/message.h, CheckPartSizes):
    // a part's exact byte count (-1: any) and its value size.
    .Attr("part_bytes: list(int) = []")
    .Attr("item_bytes: list(int) = []")
    .Output("parts: out_types")
    .SetShapeFn([](InferenceContext* c) {
      std::string what;
      TF_RETURN_IF_ERROR(c->GetAttr("what", &what));
      TF_RETURN_IF_ERROR(CheckParts(c->num_outputs(), what + ": "));
      std::vector<::tensorflow::PartialTensorShape> shapes;
      TF_RETURN_IF_ERROR(c->GetAttr("shapes", &shapes));
      for (int i = 0; i < c->num_outputs(); ++i) {
        if (i < static_cast<int>(shapes.size()) && shapes[i].IsFullyDefined()) {
          ::tensorflow::shape_inference::ShapeHandle shape;
          TF_RETURN_IF_ERROR(c->MakeShapeFromPartialTensorShape(shapes[i], &shape));
          c->set_output(i, shape);
        } else {
          c->set_output(i, c->Vector(InferenceContext::kUnknownDim));
        }
      }
      return ::absl::Status();
    });

}  // namespace tlc
