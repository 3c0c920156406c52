// The restricted reader of torch.save's pickle (pickle_reader.h): bounded whatever the bytes.
// Numbers are little-endian (BINFLOAT big-endian), as pickle defines them.
#include "checkpoint/pickle_reader.h"

#include <ATen/ATen.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "dtrain/error.h"
#include "util/format.h"

namespace dtrain::detail {

// Python's typed storage classes (torch.FloatStorage, ...), which name a storage's dtype.
const std::vector<std::pair<at::ScalarType, std::string>>& storage_classes() {
  static const std::vector<std::pair<at::ScalarType, std::string>> classes = {
      {at::kFloat, "FloatStorage"},
      {at::kDouble, "DoubleStorage"},
      {at::kHalf, "HalfStorage"},
      {at::kBFloat16, "BFloat16Storage"},
      {at::kLong, "LongStorage"},
      {at::kInt, "IntStorage"},
      {at::kShort, "ShortStorage"},
      {at::kChar, "CharStorage"},
      {at::kByte, "ByteStorage"},
      {at::kBool, "BoolStorage"},
      {at::kComplexFloat, "ComplexFloatStorage"},
      {at::kComplexDouble, "ComplexDoubleStorage"}};
  return classes;
}

const char* kind_name(PickleValue::Kind k) {
  using K = PickleValue::Kind;
  switch (k) {
    case K::kNone:
      return "None";
    case K::kBool:
      return "bool";
    case K::kInt:
      return "int";
    case K::kFloat:
      return "float";
    case K::kString:
      return "str";
    case K::kTuple:
      return "tuple";
    case K::kList:
      return "list";
    case K::kDict:
      return "dict";
    case K::kTensor:
      return "tensor";
    case K::kStorage:
      return "storage";
    case K::kGlobal:
      return "Python class or function";
  }
  return "value";
}

const PickleValue* PickleValue::find(const std::string& key) const {
  const auto it = index.find(key);
  return it == index.end() ? nullptr : items[it->second + 1].get();
}

namespace {

using Value = PickleValue;
using Ref = PickleRef;

Ref make(Value::Kind kind) {
  auto v = std::make_shared<Value>();
  v->kind = kind;
  return v;
}

// Reads the pickle subset that torch.save writes for a dict of tensors. `load_storage(key,
// dtype, numel)` returns the flat values of storage record `key`.
class Unpickler {
 public:
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
      if (items[k]->kind == Value::Kind::kString) {
        const auto [it, added] = container->index.emplace(items[k]->s, container->items.size());
        if (!added) {  // a repeated key: the last value wins, as in Python
          container->items[it->second + 1] = items[k + 1];
          continue;
        }
      }
      container->items.insert(container->items.end(), {items[k], items[k + 1]});
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
    if (name == "torch.jit._pickle.restore_type_tag") {  // (value, "Dict[str, Any]")
      if (args.size() != 2)
        fail("restore_type_tag with " + std::to_string(args.size()) + " arguments");
      return args[0];
    }
    if (name == "torch._utils._rebuild_parameter") {
      if (args.empty()) fail("_rebuild_parameter without arguments");
      return expect(args[0], Value::Kind::kTensor, "a parameter's data");
    }
    fail("it holds a " + name +
         " object, which dtrain does not read (save a state_dict: a "
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
      case 0x80:
        read(1);
        break;  // PROTO
      case 0x95:
        read(8);
        break;  // FRAME
      case '(':
        marks_.push_back(stack_.size());
        break;  // MARK
      case '0':
        pop();
        break;  // POP
      case '1':
        pop_mark();
        break;  // POP_MARK
      case '2':
        push(top());
        break;  // DUP
      case 'N':
        push(make(K::kNone));
        break;
      case 0x88:
      case 0x89: {  // NEWTRUE, NEWFALSE
        Ref b = make(K::kBool);
        b->i = opcode == 0x88;
        push(b);
      } break;
      case 'K':
        push(integer(read_le<uint8_t>()));
        break;  // BININT1
      case 'M':
        push(integer(read_le<uint16_t>()));
        break;  // BININT2
      case 'J':
        push(integer(read_le<int32_t>()));
        break;      // BININT
      case 0x8a: {  // LONG1
        const uint8_t n = read_le<uint8_t>();
        if (n > 8) fail("an integer of more than 64 bits");
        const char* p = read(n);
        uint64_t v = 0;
        for (int k = n - 1; k >= 0; --k) v = (v << 8) | static_cast<unsigned char>(p[k]);
        if (n > 0 && n < 8 && (static_cast<unsigned char>(p[n - 1]) & 0x80))
          v |= ~uint64_t(0) << (8 * n);  // sign-extend
        push(integer(static_cast<int64_t>(v)));
      } break;
      case 'G': {  // BINFLOAT, big-endian
        const char* p = read(8);
        uint64_t bits = 0;
        for (int k = 0; k < 8; ++k) bits = (bits << 8) | static_cast<unsigned char>(p[k]);
        Ref f = make(K::kFloat);
        std::memcpy(&f->f, &bits, sizeof bits);
        push(f);
      } break;
      case 'X': {  // BINUNICODE
        const uint32_t n = read_le<uint32_t>();
        push(string(std::string(read(n), n)));
      } break;
      case 0x8c: {  // SHORT_BINUNICODE
        const uint8_t n = read_le<uint8_t>();
        push(string(std::string(read(n), n)));
      } break;
      case 0x8d: {  // BINUNICODE8
        const uint64_t n = read_le<uint64_t>();
        push(string(std::string(read(n), n)));
      } break;
      case 'c': {  // GLOBAL
        Ref g = make(K::kGlobal);
        const std::string module = read_line();
        g->s = module + "." + read_line();
        push(g);
      } break;
      case 0x93: {  // STACK_GLOBAL
        const Ref name = expect(pop(), K::kString, "a global's name");
        const Ref module = expect(pop(), K::kString, "a global's module");
        Ref g = make(K::kGlobal);
        g->s = module->s + "." + name->s;
        push(g);
      } break;
      case ')':
        push(tuple({}));
        break;  // EMPTY_TUPLE
      case 't':
        push(tuple(pop_mark()));
        break;  // TUPLE
      case 0x85:
      case 0x86:
      case 0x87: {  // TUPLE1..3
        std::vector<Ref> items(opcode - 0x84);
        for (size_t k = items.size(); k-- > 0;) items[k] = pop();
        push(tuple(std::move(items)));
      } break;
      case ']':
        push(make(K::kList));
        break;     // EMPTY_LIST
      case 'l': {  // LIST
        Ref l = make(K::kList);
        l->items = pop_mark();
        push(l);
      } break;
      case 'a': {  // APPEND
        Ref v = pop();
        expect(top(), K::kList, "the target of APPEND")->items.push_back(v);
      } break;
      case 'e': {  // APPENDS
        std::vector<Ref> items = pop_mark();
        add_items(expect(top(), K::kList, "the target of APPENDS"), items);
      } break;
      case '}':
        push(make(K::kDict));
        break;     // EMPTY_DICT
      case 'd': {  // DICT
        std::vector<Ref> items = pop_mark();
        Ref d = make(K::kDict);
        add_items(d, items);
        push(d);
      } break;
      case 's': {  // SETITEM
        Ref v = pop(), k = pop();
        add_items(top(), {k, v});
      } break;
      case 'u': {  // SETITEMS
        std::vector<Ref> items = pop_mark();
        add_items(top(), items);
      } break;
      case 'q':
        memo_put(read_le<uint8_t>());
        break;  // BINPUT
      case 'r':
        memo_put(read_le<uint32_t>());
        break;  // LONG_BINPUT
      case 0x94:
        memo_put(next_memo_++);
        break;  // MEMOIZE
      case 'h':
        memo_get(read_le<uint8_t>());
        break;  // BINGET
      case 'j':
        memo_get(read_le<uint32_t>());
        break;     // LONG_BINGET
      case 'R': {  // REDUCE
        Ref args = pop(), callable = pop();
        push(call(callable, args));
      } break;
      case 'b': {  // BUILD
        pop();     // the state: an OrderedDict's attributes (state_dict's _metadata)
        if (top()->kind != K::kDict) fail("BUILD of a " + std::string(kind_name(top()->kind)));
      } break;
      case 'Q':
        push(storage(pop()));
        break;  // BINPERSID
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

}  // namespace

PickleRef read_pickle(const std::string& pickle, const std::string& path,
                      const StorageLoader& load_storage) {
  return Unpickler(pickle, path, load_storage).run();
}

NamedTensors state_dict_of(const PickleRef& top, const std::string& path) {
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
