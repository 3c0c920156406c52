// torch.save's file format for a dict of tensors: the writer and a restricted reader
// (torch_file.h says why dtrain does not use torch::pickle_save / pickle_load). Numbers in the
// pickle and the tensor records are little-endian, as on every machine dtrain runs on.
#include "checkpoint/torch_file.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <unordered_map>

#include "dtrain/error.h"
#include "util/format.h"
#include "util/fs.h"

namespace dtrain::detail {
namespace {

// Python's typed storage classes (torch.FloatStorage, ...), which name a storage's dtype.
const std::vector<std::pair<at::ScalarType, std::string>>& storage_classes() {
  static const std::vector<std::pair<at::ScalarType, std::string>> classes = {
      {at::kFloat, "FloatStorage"},   {at::kDouble, "DoubleStorage"},
      {at::kHalf, "HalfStorage"},     {at::kBFloat16, "BFloat16Storage"},
      {at::kLong, "LongStorage"},     {at::kInt, "IntStorage"},
      {at::kShort, "ShortStorage"},   {at::kChar, "CharStorage"},
      {at::kByte, "ByteStorage"},     {at::kBool, "BoolStorage"},
      {at::kComplexFloat, "ComplexFloatStorage"},
      {at::kComplexDouble, "ComplexDoubleStorage"}};
  return classes;
}

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

// ---- reader ---------------------------------------------------------------------------------

struct Value;
using Ref = std::shared_ptr<Value>;
struct Value {
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kTuple, kList, kDict, kTensor,
                    kStorage, kGlobal };
  Kind kind = Kind::kNone;
  int64_t i = 0;
  double f = 0;
  std::string s;           // a string; a global's "module.name"
  std::vector<Ref> items;  // tuple, list; dict: key, value, key, value, ...
  at::Tensor tensor;       // tensor; storage: its values, flat
};

Ref make(Value::Kind kind) {
  auto v = std::make_shared<Value>();
  v->kind = kind;
  return v;
}

const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::kNone: return "None";
    case Value::Kind::kBool: return "bool";
    case Value::Kind::kInt: return "int";
    case Value::Kind::kFloat: return "float";
    case Value::Kind::kString: return "str";
    case Value::Kind::kTuple: return "tuple";
    case Value::Kind::kList: return "list";
    case Value::Kind::kDict: return "dict";
    case Value::Kind::kTensor: return "tensor";
    case Value::Kind::kStorage: return "storage";
    case Value::Kind::kGlobal: return "Python class or function";
  }
  return "value";
}

// Reads the pickle subset that torch.save writes for a dict of tensors. `load_storage(key,
// dtype, numel)` returns the flat values of storage record `key`.
class Unpickler {
 public:
  using StorageLoader = std::function<at::Tensor(const std::string&, at::ScalarType, int64_t)>;
  Unpickler(const std::string& data, std::string path, StorageLoader load_storage)
      : data_(data), path_(std::move(path)), load_storage_(std::move(load_storage)) {}

  Ref run() {
    while (true) {
      const auto opcode = static_cast<unsigned char>(read(1)[0]);
      if (opcode == '.') break;  // STOP
      step(opcode);
    }
    if (stack_.size() != 1 || !marks_.empty()) fail("the pickle does not end with one value");
    return stack_.back();
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("not a torch.save file of tensors: " + what + " (data.pkl byte " +
                    std::to_string(pos_) + ")",
                path_);
  }

  const char* read(size_t n) {
    if (n > data_.size() - pos_) fail("the pickle ends early");
    const char* p = data_.data() + pos_;
    pos_ += n;
    return p;
  }
  template <typename T>
  T read_le() {
    T v;
    std::memcpy(&v, read(sizeof v), sizeof v);
    return v;
  }
  std::string read_line() {
    const size_t end = data_.find('\n', pos_);
    if (end == std::string::npos) fail("the pickle ends early");
    std::string line = data_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return line;
  }

  void push(Ref v) { stack_.push_back(std::move(v)); }
  Ref pop() {
    if (stack_.empty() || (!marks_.empty() && stack_.size() <= marks_.back()))
      fail("malformed pickle (stack underflow)");
    Ref v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  Ref& top() {
    if (stack_.empty()) fail("malformed pickle (stack underflow)");
    return stack_.back();
  }
  std::vector<Ref> pop_mark() {
    if (marks_.empty()) fail("malformed pickle (no mark)");
    const size_t start = marks_.back();
    marks_.pop_back();
    std::vector<Ref> items(stack_.begin() + static_cast<std::ptrdiff_t>(start), stack_.end());
    stack_.resize(start);
    return items;
  }
  Ref expect(Ref v, Value::Kind kind, const char* what) {
    if (v->kind != kind)
      fail(std::string(what) + " is of type " + kind_name(v->kind) + ", expected " +
           kind_name(kind));
    return v;
  }
  Ref tuple(std::vector<Ref> items) {
    Ref t = make(Value::Kind::kTuple);
    t->items = std::move(items);
    return t;
  }
  Ref string(std::string s) {
    Ref v = make(Value::Kind::kString);
    v->s = std::move(s);
    return v;
  }
  Ref integer(int64_t i) {
    Ref v = make(Value::Kind::kInt);
    v->i = i;
    return v;
  }
  void memo_put(uint64_t id) { memo_[id] = top(); }
  void memo_get(uint64_t id) {
    auto it = memo_.find(id);
    if (it == memo_.end()) fail("malformed pickle (unknown memo " + std::to_string(id) + ")");
    push(it->second);
  }
  void add_items(Ref container, const std::vector<Ref>& items) {
    if (container->kind == Value::Kind::kList) {
      container->items.insert(container->items.end(), items.begin(), items.end());
      return;
    }
    expect(container, Value::Kind::kDict, "the target of SETITEMS");
    if (items.size() % 2 != 0) fail("malformed pickle (odd SETITEMS)");
    for (size_t k = 0; k < items.size(); k += 2) {
      bool replaced = false;
      for (size_t j = 0; j < container->items.size(); j += 2) {
        const Ref& key = container->items[j];
        if (key->kind == Value::Kind::kString && items[k]->kind == Value::Kind::kString &&
            key->s == items[k]->s) {
          container->items[j + 1] = items[k + 1];
          replaced = true;
        }
      }
      if (!replaced) container->items.insert(container->items.end(), {items[k], items[k + 1]});
    }
  }

  std::vector<int64_t> int_tuple(const Ref& v, const char* what) {
    expect(v, Value::Kind::kTuple, what);
    std::vector<int64_t> out;
    for (const Ref& x : v->items) out.push_back(expect(x, Value::Kind::kInt, what)->i);
    return out;
  }

  // A view of `storage` (flat values) as torch._utils._rebuild_tensor_v2 describes it, checked
  // to lie inside the storage.
  Ref rebuild_tensor(const std::vector<Ref>& args) {
    if (args.size() < 4)
      fail("_rebuild_tensor_v2 with " + std::to_string(args.size()) + " arguments");
    const at::Tensor& flat = expect(args[0], Value::Kind::kStorage, "a tensor's storage")->tensor;
    const int64_t offset = expect(args[1], Value::Kind::kInt, "a tensor's offset")->i;
    const auto sizes = int_tuple(args[2], "a tensor's shape");
    const auto strides = int_tuple(args[3], "a tensor's strides");
    if (sizes.size() != strides.size() || offset < 0) fail("a tensor with an invalid layout");
    int64_t last = offset;  // the last element's index, when the tensor has any
    bool empty = false;
    for (size_t d = 0; d < sizes.size(); ++d) {
      if (sizes[d] < 0 || strides[d] < 0) fail("a tensor with an invalid layout");
      if (sizes[d] == 0) empty = true;
      int64_t step = 0;
      if (__builtin_mul_overflow(sizes[d] == 0 ? 0 : sizes[d] - 1, strides[d], &step) ||
          __builtin_add_overflow(last, step, &last))
        fail("a tensor larger than its storage");
    }
    if (!empty && last >= flat.numel())
      fail("a tensor of shape " + shape_str(sizes) + " that does not fit in its storage of " +
           std::to_string(flat.numel()) + " values");
    Ref t = make(Value::Kind::kTensor);
    t->tensor = flat.as_strided(sizes, strides, offset);
    return t;
  }

  Ref call(const Ref& callable, const Ref& args_ref) {
    expect(callable, Value::Kind::kGlobal, "a called object");
    const auto& args = expect(args_ref, Value::Kind::kTuple, "the arguments of a call")->items;
    const std::string& name = callable->s;
    if (name == "collections.OrderedDict") {
      if (!args.empty()) fail("collections.OrderedDict called with arguments");
      return make(Value::Kind::kDict);
    }
    if (name == "torch._utils._rebuild_tensor_v2") return rebuild_tensor(args);
    if (name == "torch._utils._rebuild_parameter") {
      if (args.empty()) fail("_rebuild_parameter without arguments");
      return expect(args[0], Value::Kind::kTensor, "a parameter's data");
    }
    fail("it holds a " + name + " object, which dtrain does not read (save a state_dict: a "
         "dict of tensors)");
  }

  Ref storage(const Ref& pid_ref) {
    const auto& pid = expect(pid_ref, Value::Kind::kTuple, "a persistent id")->items;
    if (pid.size() != 5 || pid[0]->kind != Value::Kind::kString || pid[0]->s != "storage")
      fail("a persistent id that is not a storage");
    const std::string& cls = expect(pid[1], Value::Kind::kGlobal, "a storage's type")->s;
    const std::string& key = expect(pid[2], Value::Kind::kString, "a storage's key")->s;
    const int64_t numel = expect(pid[4], Value::Kind::kInt, "a storage's size")->i;
    if (numel < 0) fail("a storage of negative size");
    for (const auto& c : storage_classes()) {
      if (cls == "torch." + c.second) {
        Ref s = make(Value::Kind::kStorage);
        s->tensor = load_storage_(key, c.first, numel);
        return s;
      }
    }
    fail("a storage of type " + cls + ", which dtrain does not read");
  }

  void step(unsigned char opcode) {
    using K = Value::Kind;
    switch (opcode) {
      case 0x80: read(1); break;                       // PROTO
      case 0x95: read(8); break;                       // FRAME
      case '(': marks_.push_back(stack_.size()); break;  // MARK
      case '0': pop(); break;                          // POP
      case '1': pop_mark(); break;                     // POP_MARK
      case '2': push(top()); break;                    // DUP
      case 'N': push(make(K::kNone)); break;
      case 0x88: case 0x89: {                          // NEWTRUE, NEWFALSE
        Ref b = make(K::kBool);
        b->i = opcode == 0x88;
        push(b);
      } break;
      case 'K': push(integer(read_le<uint8_t>())); break;   // BININT1
      case 'M': push(integer(read_le<uint16_t>())); break;  // BININT2
      case 'J': push(integer(read_le<int32_t>())); break;   // BININT
      case 0x8a: {                                          // LONG1
        const uint8_t n = read_le<uint8_t>();
        if (n > 8) fail("an integer of more than 64 bits");
        const char* p = read(n);
        uint64_t v = 0;
        for (int k = n - 1; k >= 0; --k) v = (v << 8) | static_cast<unsigned char>(p[k]);
        if (n > 0 && n < 8 && (static_cast<unsigned char>(p[n - 1]) & 0x80))
          v |= ~uint64_t(0) << (8 * n);  // sign-extend
        push(integer(static_cast<int64_t>(v)));
      } break;
      case 'G': {                                           // BINFLOAT, big-endian
        const char* p = read(8);
        uint64_t bits = 0;
        for (int k = 0; k < 8; ++k) bits = (bits << 8) | static_cast<unsigned char>(p[k]);
        Ref f = make(K::kFloat);
        std::memcpy(&f->f, &bits, sizeof bits);
        push(f);
      } break;
      case 'X': {                                           // BINUNICODE
        const uint32_t n = read_le<uint32_t>();
        push(string(std::string(read(n), n)));
      } break;
      case 0x8c: {                                          // SHORT_BINUNICODE
        const uint8_t n = read_le<uint8_t>();
        push(string(std::string(read(n), n)));
      } break;
      case 0x8d: {                                          // BINUNICODE8
        const uint64_t n = read_le<uint64_t>();
        push(string(std::string(read(n), n)));
      } break;
      case 'c': {                                           // GLOBAL
        Ref g = make(K::kGlobal);
        const std::string module = read_line();
        g->s = module + "." + read_line();
        push(g);
      } break;
      case 0x93: {                                          // STACK_GLOBAL
        const Ref name = expect(pop(), K::kString, "a global's name");
        const Ref module = expect(pop(), K::kString, "a global's module");
        Ref g = make(K::kGlobal);
        g->s = module->s + "." + name->s;
        push(g);
      } break;
      case ')': push(tuple({})); break;                     // EMPTY_TUPLE
      case 't': push(tuple(pop_mark())); break;             // TUPLE
      case 0x85: case 0x86: case 0x87: {                    // TUPLE1..3
        std::vector<Ref> items(opcode - 0x84);
        for (size_t k = items.size(); k-- > 0;) items[k] = pop();
        push(tuple(std::move(items)));
      } break;
      case ']': push(make(K::kList)); break;                // EMPTY_LIST
      case 'l': {                                           // LIST
        Ref l = make(K::kList);
        l->items = pop_mark();
        push(l);
      } break;
      case 'a': {                                           // APPEND
        Ref v = pop();
        expect(top(), K::kList, "the target of APPEND")->items.push_back(v);
      } break;
      case 'e': {                                           // APPENDS
        std::vector<Ref> items = pop_mark();
        add_items(expect(top(), K::kList, "the target of APPENDS"), items);
      } break;
      case '}': push(make(K::kDict)); break;                // EMPTY_DICT
      case 'd': {                                           // DICT
        std::vector<Ref> items = pop_mark();
        Ref d = make(K::kDict);
        add_items(d, items);
        push(d);
      } break;
      case 's': {                                           // SETITEM
        Ref v = pop(), k = pop();
        add_items(top(), {k, v});
      } break;
      case 'u': {                                           // SETITEMS
        std::vector<Ref> items = pop_mark();
        add_items(top(), items);
      } break;
      case 'q': memo_put(read_le<uint8_t>()); break;        // BINPUT
      case 'r': memo_put(read_le<uint32_t>()); break;       // LONG_BINPUT
      case 0x94: memo_put(next_memo_++); break;             // MEMOIZE
      case 'h': memo_get(read_le<uint8_t>()); break;        // BINGET
      case 'j': memo_get(read_le<uint32_t>()); break;       // LONG_BINGET
      case 'R': {                                           // REDUCE
        Ref args = pop(), callable = pop();
        push(call(callable, args));
      } break;
      case 'b': {                                           // BUILD
        pop();  // the state: an OrderedDict's attributes (state_dict's _metadata)
        if (top()->kind != K::kDict) fail("BUILD of a " + std::string(kind_name(top()->kind)));
      } break;
      case 'Q': push(storage(pop())); break;                // BINPERSID
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", opcode);
        fail(std::string("pickle opcode ") + hex + ", which dtrain does not read");
      }
    }
  }

  const std::string& data_;
  size_t pos_ = 0;
  std::string path_;
  StorageLoader load_storage_;
  std::vector<Ref> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, Ref> memo_;
  uint64_t next_memo_ = 0;
};

std::string first_line_of(const c10::Error& e) { return first_line(e.what_without_backtrace()); }

}  // namespace

std::string torch_save_bytes(const NamedTensors& tensors) {
  PickleWriter p;
  p.op('\x80'), p.raw<uint8_t>(2);  // PROTO 2
  p.empty_ordered_dict();
  p.op('(');  // MARK
  std::vector<at::Tensor> records;  // CPU contiguous, one per storage
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
    p.op('\x89');  // NEWFALSE: requires_grad
    p.empty_ordered_dict();  // backward hooks
    p.op('t');
    p.op('R');
  }
  p.op('u');  // SETITEMS
  p.op('.');  // STOP

  std::string out;
  caffe2::serialize::PyTorchStreamWriter writer([&out](const void* data, size_t n) {
    out.append(static_cast<const char*>(data), n);
    return n;
  });
  writer.writeRecord("data.pkl", p.bytes().data(), p.bytes().size());
  writer.writeRecord("byteorder", "little", 6);
  for (size_t k = 0; k < records.size(); ++k) {
    writer.writeRecord("data/" + std::to_string(k), records[k].data_ptr(), records[k].nbytes());
  }
  writer.writeEndOfFile();
  return out;
}

NamedTensors torch_load_file(const std::string& path) {
  if (!path_exists(path)) throw Error("no such file", path);
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> zip;
  std::string pickle;
  try {
    zip = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
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
    std::ifstream f(path, std::ios::binary);
    char head[2] = {0, 0};
    f.read(head, 2);
    if (static_cast<unsigned char>(head[0]) == 0x80)
      throw Error("a file in the format of torch.save before PyTorch 1.6, which dtrain does not "
                  "read: save it again with torch.save in PyTorch 1.6 or later",
                  path);
    throw Error("not a file written by torch.save (truncated, or not a zip archive: " +
                    first_line_of(e) + ")",
                path);
  }

  std::map<std::string, at::Tensor> storages;
  auto load_storage = [&](const std::string& key, at::ScalarType dtype, int64_t numel) {
    auto it = storages.find(key);
    if (it != storages.end()) {
      if (it->second.scalar_type() != dtype || it->second.numel() != numel)
        throw Error("not a torch.save file of tensors: storage " + key +
                        " is used with two types or sizes",
                    path);
      return it->second;
    }
    const std::string record = "data/" + key;
    at::Tensor flat = at::empty({numel}, at::TensorOptions().dtype(dtype));
    try {
      if (!zip->hasRecord(record))
        throw Error("not a torch.save file of tensors: no record " + record, path);
      auto [ptr, n] = zip->getRecord(record);
      if (n != flat.nbytes())
        throw Error("not a torch.save file of tensors: record " + record + " has " +
                        std::to_string(n) + " bytes, its storage needs " +
                        std::to_string(flat.nbytes()),
                    path);
      if (n > 0) std::memcpy(flat.data_ptr(), ptr.get(), n);
    } catch (const c10::Error& e) {
      throw Error("not a torch.save file of tensors: record " + record + ": " + first_line_of(e),
                  path);
    }
    storages.emplace(key, flat);
    return flat;
  };

  Ref top;
  try {
    top = Unpickler(pickle, path, load_storage).run();
  } catch (const c10::Error& e) {
    throw Error("not a torch.save file of tensors: " + first_line_of(e), path);
  }
  if (top->kind != Value::Kind::kDict)
    throw Error(std::string("holds a value of type ") + kind_name(top->kind) +
                    ", not a dict of tensors (save a state_dict)",
                path);
  NamedTensors out;
  for (size_t k = 0; k < top->items.size(); k += 2) {
    const Ref& key = top->items[k];
    const Ref& value = top->items[k + 1];
    if (key->kind != Value::Kind::kString)
      throw Error(std::string("a dict with a key of type ") + kind_name(key->kind) +
                      ": not a state_dict (keys are names)",
                  path);
    if (value->kind != Value::Kind::kTensor)
      throw Error("entry " + key->s + " is of type " + kind_name(value->kind) +
                      ", not a tensor: not a state_dict",
                  path);
    out.emplace_back(key->s, value->tensor);
  }
  return out;
}

}  // namespace dtrain::detail
