// The round board (ops: board_ops.cc). One per parameter server: for each
// push bucket, the latest round whose pull message the chief's update has
// logged. A worker's reply for a bucket waits until the round its push went
// into is there and then reads the log, so a bucket's pull leaves the PS
// while later buckets' pushes still arrive. Unlike a token, a wait takes
// nothing: a step that dies waiting leaves nothing behind for another.
//
// The wait is an AsyncOpKernel: it never holds an inter-op thread, and a
// cancelled step (a closed session) cancels it.
#include <list>
#include <string>
#include <utility>
#include <vector>

#include "pending.h"
#include "scalar_input.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/platform/mutex.h"

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

class RoundBoard : public ResourceBase {
 public:
  explicit RoundBoard(int64_t num_buckets) : rounds_(num_buckets, 0) {}

  std::string DebugString() const override {
    return "TlcRoundBoard of " + std::to_string(rounds_.size()) + " buckets";
  }

  int64_t num_buckets() const { return static_cast<int64_t>(rounds_.size()); }

  ::absl::Status CheckBucket(int64_t bucket) const {
    if (bucket < 0 || bucket >= num_buckets()) {
      return errors::InvalidArgument("bucket ", bucket, " is not on a board of ", num_buckets(),
                                     " buckets");
    }
    return ::absl::OkStatus();
  }

  void Publish(int64_t bucket, int64_t round) {
    std::vector<Wait> finished;
    {
      mutex_lock lock(mu_);
      rounds_[bucket] = round;
      for (auto it = waits_.begin(); it != waits_.end();) {
        if (it->bucket == bucket && round >= it->at_least) {
          it->round = round;
          finished.push_back(std::move(*it));
          it = waits_.erase(it);
        } else {
          ++it;
        }
      }
    }
    Finish(&finished);
  }

  void Reset(int64_t round) {
    std::vector<Wait> finished;
    {
      mutex_lock lock(mu_);
      for (int64_t& r : rounds_) r = round;
      for (Wait& w : waits_) {
        w.round = round;
        finished.push_back(std::move(w));
      }
      waits_.clear();
    }
    Finish(&finished);
  }

  std::vector<int64_t> Read() {
    mutex_lock lock(mu_);
    return rounds_;
  }

  // Completes at once if the bucket's round is at least at_least, else
  // when a publish or a reset comes; `done` runs once it has its output or
  // was cancelled.
  void Await(OpKernelContext* ctx, int64_t bucket, int64_t at_least,
             AsyncOpKernel::DoneCallback done) {
    CancellationManager* cm = ctx->cancellation_manager();
    CancellationToken token = CancellationManager::kInvalidToken;
    std::vector<Wait> finished;
    bool cancelled = false;
    {
      mutex_lock lock(mu_);
      Wait wait{ctx, bucket, at_least, rounds_[bucket], std::move(done), cm, token};
      if (rounds_[bucket] >= at_least) {
        finished.push_back(std::move(wait));
      } else {
        if (cm != nullptr) {
          token = cm->get_cancellation_token();
          wait.token = token;
          cancelled = !cm->RegisterCallback(token, [this, cm, token] { Cancel(cm, token); });
        }
        if (cancelled) {
          finished.push_back(std::move(wait));
        } else {
          waits_.push_back(std::move(wait));
        }
      }
    }
    if (cancelled) {
      finished[0].ctx->SetStatus(errors::Cancelled("TlcRoundBoard wait was cancelled"));
      finished[0].done();
      return;
    }
    Finish(&finished);
  }

 private:
  struct Wait {
    OpKernelContext* ctx;
    int64_t bucket;
    int64_t at_least;
    int64_t round;  // the output, once finished
    AsyncOpKernel::DoneCallback done;
    CancellationManager* cm;
    CancellationToken token;
  };

  void Cancel(CancellationManager* cm, CancellationToken token) {
    CancelPending(&mu_, &waits_, cm, token, "TlcRoundBoard wait was cancelled");
  }

  // Outside the lock: outputs, then the callbacks.
  static void Finish(std::vector<Wait>* finished) {
    for (Wait& w : *finished) {
      if (w.cm != nullptr && w.token != CancellationManager::kInvalidToken) {
        w.cm->DeregisterCallback(w.token);
      }
      Tensor* out = nullptr;
      const ::absl::Status s = w.ctx->allocate_output(0, TensorShape({}), &out);
      if (s.ok()) {
        out->scalar<int64_t>()() = w.round;
      } else {
        w.ctx->SetStatus(s);
      }
      w.done();
    }
  }

  mutex mu_;
  std::vector<int64_t> rounds_;
  std::list<Wait> waits_;
};

class RoundBoardOp : public OpKernel {
 public:
  explicit RoundBoardOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("num_buckets", &num_buckets_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("container", &container_));
    OP_REQUIRES_OK(ctx, ctx->GetAttr("shared_name", &shared_name_));
    if (shared_name_.empty()) shared_name_ = name();
  }

  void Compute(OpKernelContext* ctx) override {
    const ResourceHandle handle =
        ::tensorflow::MakeResourceHandle<RoundBoard>(ctx, container_, shared_name_);
    core::RefCountPtr<RoundBoard> board;
    OP_REQUIRES_OK(ctx, ::tensorflow::LookupOrCreateResource<RoundBoard>(
                            ctx, handle, &board, [this](RoundBoard** made) {
                              *made = new RoundBoard(num_buckets_);
                              return ::absl::OkStatus();
                            }));
    OP_REQUIRES(ctx, board->num_buckets() == num_buckets_,
                errors::InvalidArgument("a round board of that name has ", board->num_buckets(),
                                        " buckets (asked: ", num_buckets_, ")"));
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({}), &out));
    out->scalar<ResourceHandle>()() = handle;
  }

 private:
  int64_t num_buckets_;
  std::string container_, shared_name_;
};

bool Lookup(OpKernelContext* ctx, core::RefCountPtr<RoundBoard>* board) {
  return ResourceInput(ctx, board);
}

// The board and a checked bucket from inputs 0 and 1.
bool BoardAndBucket(OpKernelContext* ctx, core::RefCountPtr<RoundBoard>* board,
                    int32_t* bucket) {
  if (!Lookup(ctx, board) || !ScalarInput<int32_t>(ctx, 1, "bucket", bucket)) return false;
  const ::absl::Status s = (*board)->CheckBucket(*bucket);
  if (!s.ok()) ctx->CtxFailure(__FILE__, __LINE__, s);
  return s.ok();
}

class PublishOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    core::RefCountPtr<RoundBoard> board;
    int32_t bucket;
    int64_t round;
    if (!BoardAndBucket(ctx, &board, &bucket) ||
        !ScalarInput<int64_t>(ctx, 2, "round", &round)) {
      return;
    }
    board->Publish(bucket, round);
  }
};

class ResetOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    core::RefCountPtr<RoundBoard> board;
    int64_t round;
    if (!Lookup(ctx, &board) || !ScalarInput<int64_t>(ctx, 1, "round", &round)) return;
    board->Reset(round);
  }
};

class WaitOp : public AsyncOpKernel {
 public:
  using AsyncOpKernel::AsyncOpKernel;

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    core::RefCountPtr<RoundBoard> board;
    int32_t bucket;
    int64_t at_least;
    if (!BoardAndBucket(ctx, &board, &bucket) ||
        !ScalarInput<int64_t>(ctx, 2, "at_least", &at_least)) {
      done();
      return;
    }
    // The wait keeps the board alive until it is done.
    RoundBoard* raw = board.release();
    raw->Await(ctx, bucket, at_least, [raw, done = std::move(done)] {
      done();
      raw->Unref();
    });
  }
};

class ReadOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* ctx) override {
    core::RefCountPtr<RoundBoard> board;
    if (!Lookup(ctx, &board)) return;
    const std::vector<int64_t> rounds = board->Read();
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(
                            0, TensorShape({static_cast<int64_t>(rounds.size())}), &out));
    for (size_t i = 0; i < rounds.size(); ++i) out->vec<int64_t>()(i) = rounds[i];
  }
};

REGISTER_KERNEL_BUILDER(Name("TlcRoundBoard").Device(DEVICE_CPU), RoundBoardOp);
REGISTER_KERNEL_BUILDER(Name("TlcRoundBoardPublish").Device(DEVICE_CPU), PublishOp);
REGISTER_KERNEL_BUILDER(Name("TlcRoundBoardReset").Device(DEVICE_CPU), ResetOp);
REGISTER_KERNEL_BUILDER(Name("TlcRoundBoardWait").Device(DEVICE_CPU), WaitOp);
REGISTER_KERNEL_BUILDER(Name("TlcRoundBoardRead").Device(DEVICE_CPU), ReadOp);

}  // namespace
}  // namespace tlc
