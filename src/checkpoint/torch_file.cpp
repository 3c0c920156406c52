// torch.save's file format for a dict of tensors: the zip archive, the pickle writer, and the
// records the reader (pickle_reader.cpp) asks for. torch_file.h says why dtrain does not use
// torch::pickle_save / pickle_load. Numbers in the pickle and the tensor records are
// little-endian, as on every machine dtrain runs on.
#include "checkpoint/torch_file.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <new>

#include "checkpoint/pickle_reader.h"
#include "dtrain/error.h"
#include "util/format.h"
#include "util/fs.h"

namespace dtrain::detail {
namespace {

// ---- writer ---------------------------------------------------------------------------------

class PickleWriter {
 public:
  std::string& bytes() { return out_; }
  void op(char c) { out_.push_back(c); }
  template <typename T>
  void raw(T v) {
    out_.append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  void string(const std::string& s) {
    op('X');  // BINUNICODE
    raw<uint32_t>(static_cast<uint32_t>(s.size()));
    out_ += s;
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      op('K'), raw<uint8_t>(static_cast<uint8_t>(v));  // BININT1
    } else if (v >= 0 && v < 65536) {
      op('M'), raw<uint16_t>(static_cast<uint16_t>(v));  // BININT2
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
      op('J'), raw<int32_t>(static_cast<int32_t>(v));  // BININT
    } else {
      op('\x8a'), raw<uint8_t>(8), raw<int64_t>(v);  // LONG1
    }
  }
  void global(const std::string& module, const std::string& name) {
    op('c');
    out_ += module + "\n" + name + "\n";
  }
  void int_tuple(at::IntArrayRef values) {
    if (values.empty()) return op(')');  // EMPTY_TUPLE
    op('(');
    for (int64_t v : values) integer(v);
    op('t');
  }
  void empty_ordered_dict() {
    global("collections", "OrderedDict");
    op(')');
    op('R');
  }

 private:
  std::string out_;
};

const std::string& storage_class(at::ScalarType dtype) {
  for (const auto& c : storage_classes()) {
    if (c.first == dtype) return c.second;
  }
  throw Error(std::string("cannot save a tensor of dtype ") + at::toString(dtype));
}

std::string first_line_of(const c10::Error& e) { return first_line(e.what_without_backtrace()); }

}  // namespace

std::string torch_save_bytes(const NamedTensors& tensors) {
  std::string out;
  torch_save_to(tensors, [&out](const char* data, size_t n) { out.append(data, n); });
  return out;
}

void torch_save_to(const NamedTensors& tensors, const ByteSink& out) {
  PickleWriter p;
  p.op('\x80'), p.raw<uint8_t>(2);  // PROTO 2
  p.empty_ordered_dict();
  p.op('(');                         // MARK
  std::vector<at::Tensor> records;   // CPU contiguous, one per storage
  std::vector<const void*> sources;  // the tensor each record was made from
  for (const auto& [name, tensor] : tensors) {
    const at::Tensor t = tensor.detach();  // a new TensorImpl: `tensor` is what identifies it
    size_t key = 0;
    while (key < sources.size() && sources[key] != tensor.unsafeGetTensorImpl()) ++key;
    if (key == sources.size()) {
      sources.push_back(tensor.unsafeGetTensorImpl());
      records.push_back(t.to(at::kCPU).contiguous());
    }
    p.string(name);
    p.global("torch._utils", "_rebuild_tensor_v2");
    p.op('(');
    p.op('(');
    p.string("storage");
    p.global("torch", storage_class(t.scalar_type()));
    p.string(std::to_string(key));
    p.string("cpu");
    p.integer(t.numel());
    p.op('t');
    p.op('Q');  // BINPERSID
    p.integer(0);
    p.int_tuple(t.sizes());
    p.int_tuple(records[key].strides());
    p.op('\x89');            // NEWFALSE: requires_grad
    p.empty_ordered_dict();  // backward hooks
    p.op('t');
    p.op('R');
  }
  p.op('u');  // SETITEMS
  p.op('.');  // STOP

  write_archive(out, [&](caffe2::serialize::PyTorchStreamWriter& writer) {
    writer.writeRecord("data.pkl", p.bytes().data(), p.bytes().size());
    writer.writeRecord("byteorder", "little", 6);
    for (size_t k = 0; k < records.size(); ++k) {
      writer.writeRecord("data/" + std::to_string(k), records[k].data_ptr(), records[k].nbytes());
    }
  });
}

void write_archive(const ByteSink& out,
                   const std::function<void(caffe2::serialize::PyTorchStreamWriter&)>& records) {
  std::exception_ptr failure;
  {
    caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t n) {
      if (failure) return n;  // dropped: the archive is lost already
      try {
        out(static_cast<const char*>(data), n);
      } catch (...) {
        failure = std::current_exception();
      }
      return n;
    });
    try {
      records(writer);
      writer.writeEndOfFile();
    } catch (...) {
      if (!failure) throw;
    }
  }
  if (failure) std::rethrow_exception(failure);
}

namespace {

// An archive in memory, for caffe2's zip reader.
class BytesAdapter : public caffe2::serialize::ReadAdapterInterface {
 public:
  explicit BytesAdapter(const std::string& bytes) : bytes_(bytes) {}
  size_t size() const override { return bytes_.size(); }
  size_t read(uint64_t pos, void* buf, size_t n, const char* /*what*/) const override {
    if (pos >= bytes_.size()) return 0;
    n = std::min<size_t>(n, bytes_.size() - pos);
    std::memcpy(buf, bytes_.data() + pos, n);
    return n;
  }

 private:
  const std::string& bytes_;
};

// The value in an archive's data.pkl, with its tensors: from the file `path`, or from `bytes`
// (named `path` in messages) when given. Every failure is an Error naming `path`; LibTorch's
// own errors (c10::Error) and an allocation that fails (a zip directory that declares a record
// larger than memory) become one.
PickleRef load_archive(const std::string& path, const std::string* bytes) {
  if (!bytes && !path_exists(path)) throw Error("no such file", path);
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> zip;
  std::string pickle;
  try {
    zip = bytes ? std::make_unique<caffe2::serialize::PyTorchStreamReader>(
                      std::make_shared<BytesAdapter>(*bytes))
                : std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
    if (!zip->hasRecord("data.pkl"))
      throw Error("a zip archive without data.pkl: not a file of torch.save", path);
    if (zip->hasRecord("byteorder")) {
      auto [ptr, n] = zip->getRecord("byteorder");
      if (std::string(static_cast<const char*>(ptr.get()), n) != "little")
        throw Error("a big-endian torch.save file, which dtrain does not read", path);
    }
    auto [ptr, n] = zip->getRecord("data.pkl");
    pickle.assign(static_cast<const char*>(ptr.get()), n);
  } catch (const c10::Error& e) {
    char head = 0;
    if (bytes) {
      if (!bytes->empty()) head = (*bytes)[0];
    } else {
      std::ifstream(path, std::ios::binary).read(&head, 1);
    }
    if (static_cast<unsigned char>(head) == 0x80)
      throw Error(
          "a file in the format of torch.save before PyTorch 1.6, which dtrain does not "
          "read: save it again with torch.save in PyTorch 1.6 or later",
          path);
    throw Error("not a file written by torch.save (truncated, or not a zip archive: " +
                    first_line_of(e) + ")",
                path);
  } catch (const std::bad_alloc&) {
    throw Error(
        "not a file written by torch.save (its zip directory declares a record larger "
        "than memory: truncated or corrupt?)",
        path);
  }

  std::map<std::string, at::Tensor> storages;
  auto load_storage = [&](const std::string& key, at::ScalarType dtype, int64_t numel) {
    auto it = storages.find(key);
    if (it != storages.end()) {
      if (it->second.scalar_type() != dtype || it->second.numel() != numel)
        throw Error(
            "not a torch.save file of tensors: storage " + key + " is used with two types or sizes",
            path);
      return it->second;
    }
    const std::string record = "data/" + key;
    const size_t item = c10::elementSize(dtype);
    size_t need = 0;
    if (numel < 0 || __builtin_mul_overflow(static_cast<size_t>(numel), item, &need))
      throw Error("not a torch.save file of tensors: storage " + key + " of " +
                      std::to_string(numel) + " values",
                  path);
    at::Tensor flat;
    try {
      if (!zip->hasRecord(record))
        throw Error("not a torch.save file of tensors: no record " + record, path);
      auto [ptr, n] = zip->getRecord(record);  // its size as the archive has it, then checked
      if (n != need)
        throw Error("not a torch.save file of tensors: record " + record + " has " +
                        std::to_string(n) + " bytes, its storage needs " + std::to_string(need),
                    path);
      flat = at::empty({numel}, at::TensorOptions().dtype(dtype));
      if (n > 0) std::memcpy(flat.data_ptr(), ptr.get(), n);
    } catch (const c10::Error& e) {
      throw Error("not a torch.save file of tensors: record " + record + ": " + first_line_of(e),
                  path);
    } catch (const std::bad_alloc&) {
      throw Error("not a torch.save file of tensors: record " + record +
                      " declares more bytes than memory holds (truncated or corrupt?)",
                  path);
    }
    storages.emplace(key, flat);
    return flat;
  };

  try {
    return read_pickle(pickle, path, load_storage);
  } catch (const c10::Error& e) {
    throw Error("not a torch.save file of tensors: " + first_line_of(e), path);
  } catch (const std::bad_alloc&) {
    throw Error("not a torch.save file of tensors: out of memory while reading its pickle", path);
  }
}

}  // namespace

NamedTensors torch_load_file(const std::string& path) {
  const PickleRef top = load_archive(path, nullptr);
  return state_dict_of(top, path);
}

PickleRef torch_load_bytes(const std::string& bytes, const std::string& path) {
  return load_archive(path, &bytes);
}

}  // namespace dtrain::detail
