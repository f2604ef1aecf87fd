// Op definitions of the round board: on a parameter server, per push bucket,
// the round gate (the workers' pushes that arrived for the bucket's round,
// which the chief's update takes) and the latest round whose pull message
// the bucket has logged (a worker's reply waits on it without taking
// anything, unlike a token). Kernels are in board_kernels.cc, the Python
// wrapper in tlc/ops.py (RoundBoard).
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tlc {

using ::tensorflow::shape_inference::InferenceContext;

namespace {

::absl::Status ScalarOutput(InferenceContext* c) {
  c->set_output(0, c->Scalar());
  return ::absl::OkStatus();
}

::absl::Status NoOutput(InferenceContext*) { return ::absl::OkStatus(); }

}  // namespace

REGISTER_OP("TlcRoundBoard")
    .Output("handle: resource")
    .Attr("num_buckets: int >= 1")
    .Attr("container: string = ''")
    .Attr("shared_name: string = ''")
    .SetIsStateful()
    .SetShapeFn(ScalarOutput)
    .Doc("A board of num_buckets rounds, all 0 when made (made on first use).");

REGISTER_OP("TlcRoundBoardPublish")
    .Input("handle: resource")
    .Input("bucket: int32")
    .Input("round: int64")
    .SetIsStateful()
    .SetShapeFn(NoOutput)
    .Doc("Sets the bucket's round (also lower: a restore sets it back) and wakes the waits "
         "it satisfies.");

REGISTER_OP("TlcRoundBoardReset")
    .Input("handle: resource")
    .Input("round: int64")
    .SetIsStateful()
    .SetShapeFn(NoOutput)
    .Doc("Sets every bucket's logged round and gate step (its arrivals stay, as an "
         "accumulator's gradients stay when its global step is set) and ends every pending "
         "wait, satisfied or not (an update that will never publish its round: the chief "
         "died inside it).");

REGISTER_OP("TlcRoundBoardWait")
    .Input("handle: resource")
    .Input("bucket: int32")
    .Input("at_least: int64")
    .Output("round: int64")
    .SetIsStateful()
    .SetShapeFn(ScalarOutput)
    .Doc("The bucket's round once it is at least at_least, or at a reset; takes nothing.");

REGISTER_OP("TlcRoundBoardArrive")
    .Input("handle: resource")
    .Input("bucket: int32")
    .Input("local_step: int64")
    .SetIsStateful()
    .SetShapeFn(NoOutput)
    .Doc("A worker's push of the bucket has arrived; counted unless local_step is below the "
         "bucket's gate step (stale, as an accumulator drops it).");

REGISTER_OP("TlcRoundBoardTake")
    .Input("handle: resource")
    .Input("bucket: int32")
    .Input("num_required: int32")
    .Input("generation: int64")
    .Output("step: int64")
    .SetIsStateful()
    .SetShapeFn(ScalarOutput)
    .Doc("Waits for num_required arrivals in the bucket, then takes them: the gate step taken, "
         "which goes up by one. Refused (Aborted) for an update of an earlier generation, "
         "waiting or not.");

REGISTER_OP("TlcRoundBoardFence")
    .Input("handle: resource")
    .Output("generation: int64")
    .SetIsStateful()
    .SetShapeFn(ScalarOutput)
    .Doc("A new generation of updates (a chief's new session): every take of an earlier one "
         "is refused from now on, those waiting at once. Returns the new generation.");

REGISTER_OP("TlcRoundBoardGeneration")
    .Input("handle: resource")
    .Output("generation: int64")
    .SetIsStateful()
    .SetShapeFn(ScalarOutput);

REGISTER_OP("TlcRoundBoardGates")
    .Input("handle: resource")
    .Output("gates: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Matrix(3, InferenceContext::kUnknownDim));
      return ::absl::Status();
    })
    .Doc("Per bucket: the gate step, the arrivals counted, the takes waiting.");

REGISTER_OP("TlcRoundBoardRead")
    .Input("handle: resource")
    .Output("rounds: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
      return ::absl::Status();
    });

}  // namespace tlc
