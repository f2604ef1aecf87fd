// Op definitions of the round board: on a parameter server, the latest round
// whose pull message each push bucket has logged, which a worker's reply can
// wait on without taking anything (unlike a token). Kernels are in
// board_kernels.cc, the Python wrapper in tlc/ops.py (RoundBoard).
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tlc {

using ::tensorflow::shape_inference::InferenceContext;

REGISTER_OP("TlcRoundBoard")
    .Output("handle: resource")
    .Attr("num_buckets: int >= 1")
    .Attr("container: string = ''")
    .Attr("shared_name: string = ''")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Scalar());
      return ::absl::Status();
    })
    .Doc("A board of num_buckets rounds, all 0 when made (made on first use).");

REGISTER_OP("TlcRoundBoardPublish")
    .Input("handle: resource")
    .Input("bucket: int32")
    .Input("round: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return ::absl::Status(); })
    .Doc("Sets the bucket's round (also lower: a restore sets it back) and wakes the waits "
         "it satisfies.");

REGISTER_OP("TlcRoundBoardReset")
    .Input("handle: resource")
    .Input("round: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) { return ::absl::Status(); })
    .Doc("Sets every bucket's round and ends every pending wait, satisfied or not "
         "(an update that will never publish its round: the chief died inside it).");

REGISTER_OP("TlcRoundBoardWait")
    .Input("handle: resource")
    .Input("bucket: int32")
    .Input("at_least: int64")
    .Output("round: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Scalar());
      return ::absl::Status();
    })
    .Doc("The bucket's round once it is at least at_least, or at a reset; takes nothing.");

REGISTER_OP("TlcRoundBoardRead")
    .Input("handle: resource")
    .Output("rounds: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
      return ::absl::Status();
    });

}  // namespace tlc
