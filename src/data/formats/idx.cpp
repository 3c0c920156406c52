// IDX reader: header (magic 0 0 type ndims, then ndims big-endian uint32 sizes) followed by the
// big-endian elements, plain or gzip-compressed. Every disagreement between the header and the
// bytes that follow is an error naming the file.
#include "dtrain/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "dtrain/error.h"
#include "util/format.h"
#include "util/host_memory.h"

namespace dtrain {
namespace {

struct ElementType {
  at::ScalarType dtype;
  int64_t size;
  const char* name;
};

bool element_type(uint8_t code, ElementType* out) {
  switch (code) {
    case 0x08:
      *out = {at::kByte, 1, "uint8"};
      return true;
    case 0x09:
      *out = {at::kChar, 1, "int8"};
      return true;
    case 0x0B:
      *out = {at::kShort, 2, "int16"};
      return true;
    case 0x0C:
      *out = {at::kInt, 4, "int32"};
      return true;
    case 0x0D:
      *out = {at::kFloat, 4, "float32"};
      return true;
    case 0x0E:
      *out = {at::kDouble, 8, "float64"};
      return true;
    default:
      return false;
  }
}

bool host_is_little_endian() {
  const uint16_t probe = 1;
  uint8_t first = 0;
  std::memcpy(&first, &probe, 1);
  return first == 1;
}

// Owns a zlib file handle; gzread reads plain files unchanged, so one path serves both.
class GzFile {
 public:
  explicit GzFile(const std::string& path) : f_(gzopen(path.c_str(), "rb")) {
    if (f_ != nullptr) gzbuffer(f_, 1 << 17);
  }
  ~GzFile() {
    if (f_ != nullptr) gzclose(f_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
  gzFile get() const { return f_; }

 private:
  gzFile f_;
};

// Whether the file starts with the gzip magic bytes 1f 8b. Throws when it cannot be opened.
bool is_gzip(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    throw Error(std::string("cannot open IDX file: ") + std::strerror(errno), path);
  }
  unsigned char magic[2] = {0, 0};
  const size_t n = std::fread(magic, 1, 2, f);
  std::fclose(f);
  return n == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
}

// zlib's message for the last error, without the "path: " prefix zlib puts on it.
std::string zlib_message(gzFile f, const std::string& path) {
  int errnum = Z_OK;
  const char* msg = gzerror(f, &errnum);
  if (errnum == Z_ERRNO) return std::strerror(errno);
  std::string text = msg != nullptr ? msg : "unknown zlib error";
  if (text.rfind(path + ": ", 0) == 0) text.erase(0, path.size() + 2);
  return text;
}

// Reads up to `len` bytes; returns how many were read (less only at the end of the data).
int64_t read_bytes(gzFile f, void* dst, int64_t len, const std::string& path, bool gzip) {
  auto* p = static_cast<unsigned char*>(dst);
  int64_t total = 0;
  while (total < len) {
    const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(len - total, int64_t{1} << 30));
    const int n = gzread(f, p + total, chunk);
    if (n < 0) {
      throw Error(std::string("read failed: ") + zlib_message(f, path) +
                      (gzip ? " (the gzip stream is damaged or truncated)" : ""),
                  path);
    }
    if (n == 0) break;
    total += n;
  }
  // A gzip stream that stops early reads short and leaves Z_BUF_ERROR behind.
  if (total < len && gzip) {
    int errnum = Z_OK;
    gzerror(f, &errnum);
    if (errnum != Z_OK) {
      throw Error("the gzip stream ends early or is damaged (" + zlib_message(f, path) +
                      "); the IDX data cannot be read in full",
                  path);
    }
  }
  return total;
}

std::string dims_text(const std::vector<int64_t>& dims) {
  std::ostringstream s;
  for (size_t i = 0; i < dims.size(); ++i) s << (i ? "x" : "") << dims[i];
  return s.str();
}

}  // namespace

at::Tensor read_idx(const std::string& path) {
  const bool gzip = is_gzip(path);
  GzFile file(path);
  if (file.get() == nullptr) {
    throw Error(std::string("cannot open IDX file: ") + std::strerror(errno), path);
  }
  const std::string kind = gzip ? "uncompressed bytes" : "bytes";

  std::array<unsigned char, 4> magic{};
  const int64_t got_magic = read_bytes(file.get(), magic.data(), 4, path, gzip);
  if (got_magic < 4) {
    throw Error("not an IDX file: only " + std::to_string(got_magic) + " " + kind +
                    ", the header needs at least 4",
                path);
  }
  if (magic[0] != 0 || magic[1] != 0) {
    throw Error("not an IDX file: bad magic number " +
                    detail::format("%02x %02x %02x %02x", magic[0], magic[1], magic[2], magic[3]) +
                    " (the first two bytes must be 00 00)",
                path);
  }
  ElementType type{};
  if (!element_type(magic[2], &type)) {
    throw Error("unknown IDX element type " + detail::format("0x%02x", magic[2]) +
                    " (known: 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, "
                    "0x0E float64)",
                path);
  }
  const int ndims = magic[3];
  if (ndims < 1 || ndims > 4) {
    throw Error("IDX file has " + std::to_string(ndims) + " dimensions; dtrain reads 1 to 4", path);
  }

  std::vector<unsigned char> raw_dims(4 * static_cast<size_t>(ndims));
  const int64_t got_dims =
      read_bytes(file.get(), raw_dims.data(), static_cast<int64_t>(raw_dims.size()), path, gzip);
  const int64_t header = 4 + 4 * int64_t{ndims};
  if (got_dims < static_cast<int64_t>(raw_dims.size())) {
    throw Error("IDX header is truncated: expected " + std::to_string(header) + " " + kind +
                    " of header, file has " + std::to_string(4 + got_dims),
                path);
  }
  std::vector<int64_t> dims(ndims);
  int64_t count = 1;
  for (int d = 0; d < ndims; ++d) {
    const unsigned char* b = &raw_dims[4 * static_cast<size_t>(d)];
    dims[d] = (int64_t{b[0]} << 24) | (int64_t{b[1]} << 16) | (int64_t{b[2]} << 8) | int64_t{b[3]};
    if (dims[d] != 0 && count > std::numeric_limits<int64_t>::max() / type.size / dims[d]) {
      throw Error("IDX dimensions " + dims_text(dims) + " are too large", path);
    }
    count *= dims[d];
  }
  const int64_t data_bytes = count * type.size;
  const int64_t expected = header + data_bytes;
  auto describe_expected = [&] {
    return std::to_string(expected) + " " + kind + " (header " + std::to_string(header) + " + " +
           dims_text(dims) + " " + type.name + " elements x " + std::to_string(type.size) +
           (type.size > 1 ? " bytes)" : " byte)");
  };

  at::Tensor out;
  detail::guard_host_memory([&] { out = at::empty(dims, at::TensorOptions().dtype(type.dtype)); },
                            "reading " + dims_text(dims) + " " + type.name + " elements", path,
                            "is the header right?");
  const int64_t got = read_bytes(file.get(), out.data_ptr(), data_bytes, path, gzip);
  if (got < data_bytes) {
    throw Error("IDX data is truncated: expected " + describe_expected() + ", file has " +
                    std::to_string(header + got),
                path);
  }
  // Anything after the data means the header does not describe this file.
  std::vector<unsigned char> scratch(1 << 16);
  int64_t extra = 0;
  for (;;) {
    const int64_t n =
        read_bytes(file.get(), scratch.data(), static_cast<int64_t>(scratch.size()), path, gzip);
    extra += n;
    if (n < static_cast<int64_t>(scratch.size())) break;
  }
  if (extra > 0) {
    throw Error("IDX file has extra bytes: expected " + describe_expected() + ", file has " +
                    std::to_string(expected + extra),
                path);
  }

  if (type.size > 1 && host_is_little_endian()) {
    auto* p = static_cast<unsigned char*>(out.data_ptr());
    for (int64_t i = 0; i < count; ++i) {
      std::reverse(p + i * type.size, p + (i + 1) * type.size);
    }
  }
  return out;
}

std::shared_ptr<TensorDataset> load_idx_classification(const std::string& images_path,
                                                       const std::string& labels_path,
                                                       bool normalize, double mean, double std) {
  at::Tensor images = read_idx(images_path);  // (N, H, W) uint8
  at::Tensor labels = read_idx(labels_path);  // (N,) uint8
  if (images.scalar_type() != at::kByte || images.dim() != 3) {
    throw Error("expected images as a 3-dimensional uint8 IDX file (N, H, W), got " +
                    std::to_string(images.dim()) + " dimensions of " +
                    std::string(c10::toString(images.scalar_type())),
                images_path);
  }
  if (labels.scalar_type() != at::kByte || labels.dim() != 1) {
    throw Error("expected labels as a 1-dimensional uint8 IDX file (N,), got " +
                    std::to_string(labels.dim()) + " dimensions of " +
                    std::string(c10::toString(labels.scalar_type())),
                labels_path);
  }
  if (images.size(0) != labels.size(0)) {
    throw Error("images and labels disagree: " + images_path + " has " +
                    std::to_string(images.size(0)) + " images but " + labels_path + " has " +
                    std::to_string(labels.size(0)) + " labels",
                images_path);
  }
  if (normalize && !(std > 0.0)) {
    throw Error("cannot standardize with std " + std::to_string(std) + " (must be > 0)",
                "data.normalize");
  }
  const int64_t n = images.size(0), h = images.size(1), w = images.size(2);
  at::Tensor inputs = images.to(at::kFloat).div_(255.0).reshape({n, 1, h, w});  // (N, 1, H, W)
  if (normalize) inputs.sub_(mean).div_(std);
  at::Tensor targets = labels.to(at::kLong);  // (N,)

  DataSpec spec;
  spec.input_shape = {1, h, w};
  const int64_t max_label = n > 0 ? targets.max().item<int64_t>() : -1;
  spec.num_classes = max_label + 1;
  spec.target_dim = 0;
  spec.input_dtype = at::kFloat;

  std::ostringstream d;
  d << "idx " << images_path << " (" << n << " x 1x" << h << "x" << w << ", labels 0.."
    << max_label;
  if (normalize) d << ", standardized with mean " << mean << " std " << std;
  d << ")";
  return std::make_shared<TensorDataset>(std::move(inputs), std::move(targets), std::move(spec),
                                         d.str());
}

}  // namespace dtrain
