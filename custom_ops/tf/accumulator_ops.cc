// Op definitions of the accumulator of compressed (3LC) pushes on the
// parameter server. Kernels are in accumulator_kernels.cc, the Python
// wrapper in tlc/ops.py (CompressedAccumulator).
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tlc {

using ::tensorflow::shape_inference::InferenceContext;

REGISTER_OP("TlcCompressedAccumulator")
    .Output("handle: resource")
    .Attr("num_elements: int >= 0")
    .Attr("adaptive: bool = false")
    .Attr("block_size: int = 0")
    .Attr("container: string = ''")
    .Attr("shared_name: string = ''")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Scalar());
      return ::absl::Status();
    })
    .Doc("An accumulator of 3LC pushes of num_elements values (made on first use).");

REGISTER_OP("TlcCompressedAccumulatorApply")
    .Input("handle: resource")
    .Input("local_step: int64")
    .Input("code: uint8")
    .Input("m: float")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return ::absl::Status(); })
    .Doc("Adds a 3LC push to the step's sum unless local_step is below the global step "
         "(dropped). A malformed push fails and changes nothing, stale or not.");

REGISTER_OP("TlcCompressedAccumulatorTake")
    .Input("handle: resource")
    .Input("num_required: int32")
    .Output("average: float")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
      return ::absl::Status();
    })
    .Doc("Waits for num_required pushes; returns the average of all pushes in the sum, "
         "resets it and advances the global step by one.");

REGISTER_OP("TlcCompressedAccumulatorSetGlobalStep")
    .Input("handle: resource")
    .Input("new_global_step: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return ::absl::Status(); });

REGISTER_OP("TlcCompressedAccumulatorNumAccumulated")
    .Input("handle: resource")
    .Output("num_accumulated: int32")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Scalar());
      return ::absl::Status();
    });

}  // namespace tlc
