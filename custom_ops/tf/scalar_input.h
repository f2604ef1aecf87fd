// Reading a scalar input of a kernel, for every kernel of the op library.
#ifndef TLC_CUSTOM_OPS_TF_SCALAR_INPUT_H_
#define TLC_CUSTOM_OPS_TF_SCALAR_INPUT_H_

#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tlc {

// Input `index` as a scalar of T, or the op fails naming `name` and the shape
// it got (a hostile or malformed input changes nothing).
template <typename T>
bool ScalarInput(::tensorflow::OpKernelContext* ctx, int index, const char* name, T* value) {
  const ::tensorflow::Tensor& t = ctx->input(index);
  if (!::tensorflow::TensorShapeUtils::IsScalar(t.shape())) {
    ctx->CtxFailure(__FILE__, __LINE__,
                    ::tensorflow::errors::InvalidArgument(name, " must be a scalar, got shape ",
                                                          t.shape().DebugString()));
    return false;
  }
  *value = t.scalar<T>()();
  return true;
}

}  // namespace tlc

#endif  // TLC_CUSTOM_OPS_TF_SCALAR_INPUT_H_
