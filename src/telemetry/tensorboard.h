// TensorBoard event files, written without TensorFlow or protobuf: a file is a sequence of
// TFRecords (uint64 length, masked CRC-32C of the length, the data, masked CRC-32C of the data;
// little-endian), each holding one tensorflow.Event protobuf encoded here by hand:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
// The first record is the file version ("brain.Event:2"), as TensorBoard's readers expect.
// Every record reaches the kernel before add_scalars() returns (a crash loses nothing written),
// and every failed write is a dtrain::Error naming the file (util/fs.h's OutputFile).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "util/fs.h"

namespace dtrain::detail {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78) of `n` bytes, and TFRecord's mask of a
// CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

// One TFRecord around `data`.
std::string tfrecord(const std::string& data);

using Scalars = std::vector<std::pair<std::string, float>>;

// The Event protobufs (their bytes, unframed).
std::string file_version_event(double wall_time);
std::string scalars_event(double wall_time, int64_t step, const Scalars& values);

class EventWriter {
 public:
  // Creates `dir` and dir/events.out.tfevents.<Unix seconds>.<host name> (with ".<n>" added
  // when a file of that name exists), and writes the file-version record.
  EventWriter(const std::string& dir, double wall_time);

  // One event at `step` holding every value (an empty list writes nothing).
  void add_scalars(int64_t step, double wall_time, const Scalars& values);
  void close();  // fsync and close; throws on failure
  const std::string& path() const { return out_.path(); }

 private:
  OutputFile out_;
};

}  // namespace dtrain::detail
