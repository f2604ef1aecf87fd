// An accumulator of compressed (3LC) pushes on the parameter server: the
// semantics of TF's ConditionalAccumulator as the optimizer uses it (a push
// whose local_step is below the accumulator's global step is dropped; a take
// waits for N pushes, returns their average, resets the sum and advances the
// global step), but each push is added to the step's sum straight from its
// stream (custom_ops/core/accumulate.h) instead of from a dense decoded copy.
//
// Order: pushes are decoded outside the accumulator's lock and added under
// it in the order they take it (arrival order), as TF's accumulator does;
// later pushes may be held and added a few at a time (HeldPushes), each
// element still getting its additions in arrival order; each add runs in
// parallel over TF's CPU threads. The sum is therefore bit for bit the dense
// path's for the same pushes in the same order.
//
// The take is an AsyncOpKernel: it never holds an inter-op thread while it
// waits, and a cancelled step (a closed session) cancels it.
// Ops: accumulator_ops.cc; Python wrapper: tlc/ops.py (CompressedAccumulator).
#include <deque>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "../core/accumulate.h"
#include "../core/threelc.h"
#include "pending.h"
#include "scalar_input.h"
#include "tf_executor.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/mutex.h"
#include "tensorflow/core/util/work_sharder.h"

namespace tlc {
namespace {

using ::tensorflow::AsyncOpKernel;
using ::tensorflow::CancellationManager;
using ::tensorflow::CancellationToken;
using ::tensorflow::DEVICE_CPU;
using ::tensorflow::mutex;
using ::tensorflow::mutex_lock;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::ResourceBase;
using ::tensorflow::ResourceHandle;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
namespace errors = ::tensorflow::errors;
namespace core = ::tensorflow::core;

class CompressedAccumulator : public ResourceBase {
 public:
  CompressedAccumulator(int64_t n, bool adaptive, int64_t block_size)
      : n_(n), adaptive_(adaptive), block_size_(block_size), spare_(n) {}

  std::string DebugString() const override {
    return "TlcCompressedAccumulator of " + std::to_string(n_) + " values";
  }

  ::absl::Status CheckConfig(int64_t n, bool adaptive, int64_t block_size) const {
    if (n != n_ || adaptive != adaptive_ || block_size != block_size_) {
      return errors::InvalidArgument(
          "an accumulator of that name exists with another configuration: ", n_,
          " values, adaptive ", adaptive_, ", block_size ", block_size_, " (asked: ", n,
          " values, adaptive ", adaptive, ", block_size ", block_size, ")");
    }
    return ::absl::OkStatus();
  }

  void Apply(OpKernelContext* ctx, int64_t local_step, const Push3LC& push) {
    const Executor exec = TfExecutor(ctx);
    // Decoded (and checked in full) before the lock: pushes arriving together
    // decode side by side and queue only for their adds. A stale push is
    // dropped after it was checked, as TF drops a stale gradient.
    Decoded3LC decoded;
    spare_.Lend(&decoded);  // an added push's buffer, already in memory
    const Status s = DecodePush3LC(push, n_, block_size_, adaptive_, exec, &decoded);
    OP_REQUIRES(ctx, s.ok(), errors::InvalidArgument(s.message()));
    {
      mutex_lock lock(mu_);
      if (local_step < global_step_) {
        spare_.Keep(&decoded);
        return;
      }
      if (!has_sum_) {  // the step's buffer (the last take handed its own out)
        Tensor fresh;
        OP_REQUIRES_OK(ctx, ctx->allocate_temp(::tensorflow::DT_FLOAT, TensorShape({n_}),
                                               &fresh));
        sum_ = fresh;
        has_sum_ = true;
      }
      float* sum = sum_.flat<float>().data();
      if (CanHold(decoded, state_)) {
        HoldPush(push, std::move(decoded), &held_, &state_);
        if (held_.Full(n_)) AddHeldPushes(&held_, exec, sum, &spare_);
      } else {
        AddHeldPushes(&held_, exec, sum, &spare_);  // theirs come first
        AddDecodedPush3LC(push, decoded, exec, sum, &state_);
        spare_.Keep(&decoded);
      }
    }
    Flush();
  }

  void SetGlobalStep(int64_t step) {
    mutex_lock lock(mu_);
    if (step < global_step_) {
      LOG(WARNING) << "TlcCompressedAccumulator: global step set back from " << global_step_
                   << " to " << step;
    }
    global_step_ = step;
  }

  int32_t NumAccumulated() {
    mutex_lock lock(mu_);
    return static_cast<int32_t>(state_.count);
  }

  // Queues a take; `done` runs once it has its output or was cancelled.
  void Take(OpKernelContext* ctx, int num_required, AsyncOpKernel::DoneCallback done) {
    CancellationManager* cm = ctx->cancellation_manager();
    CancellationToken token = CancellationManager::kInvalidToken;
    bool cancelled = false;
    {
      mutex_lock lock(mu_);
      if (cm != nullptr) {
        token = cm->get_cancellation_token();
        cancelled = !cm->RegisterCallback(token, [this, cm, token] { Cancel(cm, token); });
      }
      if (!cancelled) takes_.push_back({ctx, num_required, std::move(done), cm, token});
    }
    if (cancelled) {
      ctx->SetStatus(errors::Cancelled("TlcCompressedAccumulator take was cancelled"));
      done();
      return;
    }
    Flush();
  }

 private:
  struct Attempt {
    OpKernelContext* ctx;
    int num_required;
    AsyncOpKernel::DoneCallback done;
    CancellationManager* cm;
    CancellationToken token;
  };

  void Cancel(CancellationManager* cm, CancellationToken token) {
    CancelPending(&mu_, &takes_, cm, token, "TlcCompressedAccumulator take was cancelled");
  }

  // Completes the takes whose pushes have arrived, oldest first; their
  // callbacks run outside the lock.
  void Flush() {
    std::vector<Attempt> finished;
    {
      mutex_lock lock(mu_);
      while (!takes_.empty() && state_.count >= takes_.front().num_required) {
        Attempt attempt = std::move(takes_.front());
        takes_.pop_front();
        ++global_step_;
        AddHeldPushes(&held_, TfExecutor(attempt.ctx), sum_.flat<float>().data(), &spare_);
        AverageSum(sum_.flat<float>().data(), n_, state_.count, TfExecutor(attempt.ctx));
        attempt.ctx->set_output(0, sum_);  // the buffer itself; the next push makes a new one
        sum_ = Tensor();
        has_sum_ = false;
        state_ = StepSum();
        finished.push_back(std::move(attempt));
      }
    }
    for (Attempt& attempt : finished) {
      if (attempt.cm != nullptr) attempt.cm->DeregisterCallback(attempt.token);
      attempt.done();
    }
  }

  const int64_t n_;
  const bool adaptive_;
  const int64_t block_size_;
  SparePositions spare_;
  mutex mu_;
  int64_t global_step_ = 0;
  StepSum state_;
  HeldPushes held_;  // pushes of this step counted in state_ but not yet in sum_
  Tensor sum_;
  bool has_sum_ = false;
  std::deque<Attempt> takes_;
};

class CompressedAccumulatorOp : public OpKernel {
 public:
  explicit CompressedAccumulatorOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_elements", &n_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("adaptive", &adaptive_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("block_size", &block_size_));
    const Status s = CheckBlockSize(block_size_);
    OP_REQUIRES(ctx, s.ok(), errors::InvalidArgument(s.message()));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("container", &container_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("shared_name", &shared_name_));
    if (shared_name_.empty()) shared_name_ = name();
  }

  void Compute(OpKernelContext* ctx) override {
    const ResourceHandle handle =
        ::tensorflow::MakeResourceHandle<CompressedAccumulator>(ctx, container_, shared_name_);
    core::RefCountPtr<CompressedAccumulator> accum;
    OP_REQUIRES_OK(ctx, ::tensorflow::LookupOrCreateResource<CompressedAccumulator>(
                            ctx, handle, &accum, [this](CompressedAccumulator** made) {
                              *made = new CompressedAccumulator(n_, adaptive_, block_size_);
                              return ::absl::OkStatus();
                            }));
    OP_REQUIRES_OK(ctx, accum->CheckConfig(n_, adaptive_, block_size_));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<ResourceHandle>()() = handle;
  }

 private:
  int64_t n_;
  bool adaptive_;
  int64_t block_size_;
  std::string container_, shared_name_;
};

bool Lookup(OpKernelContext* ctx, core::RefCountPtr<CompressedAccumulator>* accum) {
  return ResourceInput(ctx, accum);
}

class ApplyOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    core::RefCountPtr<CompressedAccumulator> accum;
    int64_t local_step;
    if (!Lookup(ctx, &accum) || !ScalarInput<int64_t>(ctx, 1, "local_step", &local_step)) return;
    const Tensor& code = ctx->input(2);
    const Tensor& m = ctx->input(3);
    OP_REQUIRES(ctx, m.dims() <= 1 && code.dims() == 1,
                errors::InvalidArgument("code must be a vector and m a scalar or a vector, got ",
                                        code.shape().DebugString(), " and ",
                                        m.shape().DebugString()));
    const Push3LC push{code.flat<uint8_t>().data(), code.NumElements(), m.flat<float>().data(),
                       m.NumElements()};
    accum->Apply(ctx, local_step, push);
  }
};

class TakeOp : public AsyncOpKernel {
 public:
  using AsyncOpKernel::AsyncOpKernel;

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    core::RefCountPtr<CompressedAccumulator> accum;
    int32_t num_required;
    if (!Lookup(ctx, &accum) ||
        !ScalarInput<int32_t>(ctx, 1, "num_required", &num_required)) {
      done();
      return;
    }
    if (num_required <= 0) {
      ctx->CtxFailure(__FILE__, __LINE__,
                      errors::InvalidArgument("num_required must be positive, got ",
                                              num_required));
      done();
      return;
    }
    // The attempt keeps the accumulator alive until it is done.
    CompressedAccumulator* raw = accum.release();
    raw->Take(ctx, num_required, [raw, done = std::move(done)] {
      done();
      raw->Unref();
    });
  }
};

class SetGlobalStepOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    core::RefCountPtr<CompressedAccumulator> accum;
    int64_t step;
    if (!Lookup(ctx, &accum) || !ScalarInput<int64_t>(ctx, 1, "new_global_step", &step)) return;
    accum->SetGlobalStep(step);
  }
};

class NumAccumulatedOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    core::RefCountPtr<CompressedAccumulator> accum;
    if (!Lookup(ctx, &accum)) return;
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<int32_t>()() = accum->NumAccumulated();
  }
};

REGISTER_KERNEL_BUILDER(Name("TlcCompressedAccumulator").Device(DEVICE_CPU),
                        CompressedAccumulatorOp);
REGISTER_KERNEL_BUILDER(Name("TlcCompressedAccumulatorApply").Device(DEVICE_CPU), ApplyOp);
REGISTER_KERNEL_BUILDER(Name("TlcCompressedAccumulatorTake").Device(DEVICE_CPU), TakeOp);
REGISTER_KERNEL_BUILDER(Name("TlcCompressedAccumulatorSetGlobalStep").Device(DEVICE_CPU),
                        SetGlobalStepOp);
REGISTER_KERNEL_BUILDER(Name("TlcCompressedAccumulatorNumAccumulated").Device(DEVICE_CPU),
                        NumAccumulatedOp);

}  // namespace
}  // namespace tlc
