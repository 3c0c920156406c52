// The pickle inside a torch.save file of a dict of tensors (checkpoint/torch_file.h), and inside
// LibTorch's torch::jit::pickle_save archives (checkpoint/state.h): a restricted reader of the
// subset they write (protocols 2 to 5): dicts, OrderedDicts (their _metadata is ignored), tuples,
// lists, strings, numbers, storages by persistent id, torch._utils._rebuild_tensor_v2 /
// _rebuild_parameter, and torch.jit._pickle.restore_type_tag (LibTorch's type tags, dropped).
// Anything else is an Error naming the file. Whatever the bytes, reading is bounded: every read
// is bounds-checked, every opcode costs time and memory at most in proportion to the bytes it
// reads or the values it pops (a dict finds a repeated key by an index, not by a scan), the
// reader never recurses, and every tensor must fit in its storage. That is why dtrain reads its
// own state files with it and not with LibTorch's unpickler, which allocates what a corrupt
// memo index or size asks for (a mutated LONG_BINPUT grows its memo table to 2^32 entries).
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "checkpoint/torch_file.h"

namespace dtrain::detail {

// A value of that subset.
struct PickleValue {
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kTuple,
    kList,
    kDict,
    kTensor,
    kStorage,
    kGlobal
  };
  Kind kind = Kind::kNone;
  int64_t i = 0;
  double f = 0;
  std::string s;                                    // a string; a global's "module.name"
  std::vector<std::shared_ptr<PickleValue>> items;  // tuple, list; dict: key, value, key, ...
  std::unordered_map<std::string, size_t> index;    // dict: a str key's place in items
  at::Tensor tensor;                                // tensor; storage: its values, flat

  // A dict's value under the str key `key`, or null.
  const PickleValue* find(const std::string& key) const;
};
using PickleRef = std::shared_ptr<PickleValue>;

// "int", "dict", "tensor", ...: how messages name a kind.
const char* kind_name(PickleValue::Kind kind);

// Python's typed storage classes ("FloatStorage", ...) by dtype: how a pickle names a storage's
// dtype.
const std::vector<std::pair<at::ScalarType, std::string>>& storage_classes();

// The flat values of storage record `key` (dtype, numel from the pickle).
using StorageLoader =
    std::function<at::Tensor(const std::string& key, at::ScalarType dtype, int64_t numel)>;

// The value that `pickle` (data.pkl of the file `path`) holds.
PickleRef read_pickle(const std::string& pickle, const std::string& path,
                      const StorageLoader& load_storage);

// The dict of name -> tensor that `top` (read_pickle's value of the file `path`) is, in order;
// an Error naming `path` when it is not one.
NamedTensors state_dict_of(const PickleRef& top, const std::string& path);

}  // namespace dtrain::detail
