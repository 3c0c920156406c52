#include "telemetry/tensorboard.h"

#include <unistd.h>

#include <array>
#include <cstring>

namespace dtrain::detail {
namespace {

// The table of the reflected CRC-32C polynomial, one entry per byte value.
const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

void put_fixed(std::string& out, uint64_t v, int bytes) {  // little-endian
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// A protobuf field key: (field number << 3) | wire type.
enum Wire { kVarint = 0, kFixed64 = 1, kLength = 2, kFixed32 = 5 };
void put_key(std::string& out, int field, Wire wire) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | wire);
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, kLength);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_double(std::string& out, int field, double v) {
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed64);
  put_fixed(out, bits, 8);
}

void put_float(std::string& out, int field, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  put_key(out, field, kFixed32);
  put_fixed(out, bits, 4);
}

// Event fields 1 (wall_time) and 2 (step, an int64: negative values as 10-byte varints).
std::string event_head(double wall_time, int64_t step) {
  std::string e;
  put_double(e, 1, wall_time);
  put_key(e, 2, kVarint);
  put_varint(e, static_cast<uint64_t>(step));
  return e;
}

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == 0) return "localhost";
  return buf;
}

// dir/events.out.tfevents.<seconds>.<host>, made unique with ".<n>" (a resumed run started in
// the same second as the file it continues must not truncate it).
std::string new_event_file(const std::string& dir, double wall_time) {
  make_dirs(dir);
  const std::string base =
      join_path(dir, "events.out.tfevents." + std::to_string(static_cast<int64_t>(wall_time)) +
                         "." + host_name());
  std::string path = base;
  for (int n = 1; path_exists(path); ++n) path = base + "." + std::to_string(n);
  return path;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  const auto& table = crc_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

std::string tfrecord(const std::string& data) {
  std::string length;
  put_fixed(length, data.size(), 8);
  std::string r = length;
  put_fixed(r, masked_crc32c(length.data(), length.size()), 4);
  r += data;
  put_fixed(r, masked_crc32c(data.data(), data.size()), 4);
  return r;
}

std::string file_version_event(double wall_time) {
  std::string e = event_head(wall_time, 0);
  put_bytes(e, 3, "brain.Event:2");
  return e;
}

std::string scalars_event(double wall_time, int64_t step, const Scalars& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    put_bytes(value, 1, tag);
    put_float(value, 2, v);
    put_bytes(summary, 1, value);
  }
  std::string e = event_head(wall_time, step);
  put_bytes(e, 5, summary);
  return e;
}

EventWriter::EventWriter(const std::string& dir, double wall_time)
    : out_(new_event_file(dir, wall_time)) {
  out_.write(tfrecord(file_version_event(wall_time)));
}

void EventWriter::add_scalars(int64_t step, double wall_time, const Scalars& values) {
  if (!values.empty()) out_.write(tfrecord(scalars_event(wall_time, step, values)));
}

void EventWriter::close() { out_.close(); }

}  // namespace dtrain::detail
