// The pickle inside a torch.save file of a dict of tensors (checkpoint/torch_file.h): a
// restricted reader of the subset torch.save writes (protocols 2 to 5): dicts, OrderedDicts
// (their _metadata is ignored), tuples, lists, strings, numbers, storages by persistent id and
// torch._utils._rebuild_tensor_v2 / _rebuild_parameter. Anything else is an Error naming the
// file; reads are bounds-checked and every tensor must fit in its storage.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/torch_file.h"

namespace dtrain::detail {

// Python's typed storage classes ("FloatStorage", ...) by dtype: how a pickle names a storage's
// dtype.
const std::vector<std::pair<at::ScalarType, std::string>>& storage_classes();

// The flat values of storage record `key` (dtype, numel from the pickle).
using StorageLoader =
    std::function<at::Tensor(const std::string& key, at::ScalarType dtype, int64_t numel)>;

// The dict of name -> tensor that `pickle` (data.pkl of the file `path`) describes, in order.
NamedTensors read_state_dict_pickle(const std::string& pickle, const std::string& path,
                                    const StorageLoader& load_storage);

}  // namespace dtrain::detail
