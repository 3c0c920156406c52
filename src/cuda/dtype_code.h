// The dtype code dtrain's kernels take for a tensor's element type (cuda/element_types.cuh):
// 0 fp32, 1 fp16, 2 bf16. The wrappers check the type is one of these before calling.
#pragma once

#include <c10/core/ScalarType.h>

namespace dtrain::detail {

inline int dtype_code(at::ScalarType t) { return t == at::kFloat ? 0 : t == at::kHalf ? 1 : 2; }

}  // namespace dtrain::detail
