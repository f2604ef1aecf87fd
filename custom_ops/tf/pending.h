// Shared by the kernels whose ops wait on a resource (the accumulator's take,
// the round board's wait): looking the resource up from input 0, and ending a
// pending wait when its step is cancelled (a closed session).
#ifndef TLC_CUSTOM_OPS_TF_PENDING_H_
#define TLC_CUSTOM_OPS_TF_PENDING_H_

#include <utility>

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_mgr.h"
#include "tensorflow/core/platform/mutex.h"

namespace tlc {

// The resource input 0 names, or the op fails with the lookup's error.
template <typename T>
bool ResourceInput(::tensorflow::OpKernelContext* ctx, ::tensorflow::core::RefCountPtr<T>* out) {
  ::absl::Status s = ::tensorflow::LookupResource(ctx, ::tensorflow::HandleFromInput(ctx, 0), out);
  if (!s.ok()) ctx->CtxFailure(__FILE__, __LINE__, s);
  return s.ok();
}

// Ends the wait of `pending` (a container of entries with ctx, done, cm and
// token, guarded by `mu`) registered with (cm, token): it is taken out under
// the lock and its op fails with Cancelled(what) outside it.
template <typename Container>
void CancelPending(::tensorflow::mutex* mu, Container* pending,
                   ::tensorflow::CancellationManager* cm, ::tensorflow::CancellationToken token,
                   const char* what) {
  ::tensorflow::AsyncOpKernel::DoneCallback done;
  ::tensorflow::OpKernelContext* ctx = nullptr;
  {
    ::tensorflow::mutex_lock lock(*mu);
    for (auto it = pending->begin(); it != pending->end(); ++it) {
      if (it->cm == cm && it->token == token) {
        done = std::move(it->done);
        ctx = it->ctx;
        pending->erase(it);
        break;
      }
    }
  }
  if (done) {
    ctx->SetStatus(::tensorflow::errors::Cancelled(what));
    done();
  }
}

}  // namespace tlc

#endif  // TLC_CUSTOM_OPS_TF_PENDING_H_
