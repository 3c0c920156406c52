// Files in the format of Python's torch.save for a dict of tensors (a state_dict): a zip archive
// (LibTorch's caffe2::serialize reader and writer) holding data.pkl, a pickle, and one record per
// tensor storage. dtrain writes and reads that pickle itself, for two reasons:
//   - torch::pickle_load turns every collections.OrderedDict into None (it expects them only as
//     a tensor's backward hooks), so it cannot read the OrderedDict that model.state_dict()
//     returns, in LibTorch 1.13 as in 2.x;
//   - torch::pickle_save tags its dict with torch.jit._pickle.restore_type_tag, which
//     torch.load(weights_only=True), PyTorch's default from 2.6, refuses.
// The writer emits what Python's torch.save writes for an OrderedDict of tensors (pickle protocol
// 2, torch._utils._rebuild_tensor_v2, storages by persistent id), so torch.load opens it with or
// without weights_only. The reader accepts that subset of pickle (protocols 2 to 5): dicts,
// OrderedDicts (their _metadata is ignored), tuples, lists, strings, numbers and tensors; any
// other Python object is an Error. Every malformed input is an Error naming the file, never a
// crash or a hang: reads are bounds-checked, a record's size is checked against its storage
// before anything is allocated for it, and a tensor must fit in its storage.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "util/fs.h"

namespace caffe2::serialize {
class PyTorchStreamWriter;
}

namespace dtrain::detail {

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;
struct PickleValue;  // checkpoint/pickle_reader.h
using PickleRef = std::shared_ptr<PickleValue>;

// The bytes of torch.save(OrderedDict(tensors)): each tensor as a CPU contiguous copy; entries
// that are the same tensor (tied weights) share one storage, as they do in Python.
std::string torch_save_bytes(const NamedTensors& tensors);
// The same bytes, handed to `out` as they are made (a file streamed: util/fs.h).
void torch_save_to(const NamedTensors& tensors, const ByteSink& out);

// A zip archive in torch.save's container (caffe2's PyTorchStreamWriter) streamed to `out`:
// `records` writes the records, then the archive is finished. An exception from `out` (a failed
// write) is kept while the writer finishes (it must not see one: its destructor would throw),
// the pieces after it dropped, and thrown here at the end.
void write_archive(const ByteSink& out,
                   const std::function<void(caffe2::serialize::PyTorchStreamWriter&)>& records);

// The dict of name -> tensor in a file written by torch.save (or torch_save_bytes), in the
// file's order; CPU tensors. An Error naming `path` when the file is missing, not a zip archive
// (truncated, text, the pre-1.6 format), holds no data.pkl, is not a dict of str -> tensor, or
// is malformed.
NamedTensors torch_load_file(const std::string& path);

// The value in the data.pkl of an archive given as bytes, in the format of torch.save or of
// LibTorch's torch::jit::pickle_save (checkpoint/state.h's files), read by the restricted reader
// (pickle_reader.h) with its tensors; an Error naming `path` when the bytes are not such an
// archive or hold anything else. Bounded in time and memory whatever the bytes, as
// torch_load_file is.
PickleRef torch_load_bytes(const std::string& bytes, const std::string& path);

}  // namespace dtrain::detail
