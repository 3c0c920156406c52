// CPU build: no GPU decoder; making one is the error nvjpeg_status() explains
// (src/cuda/stub/nvjpeg.cpp).
#include "cuda/jpeg_batch.h"

#include "dtrain/error.h"

namespace dtrain::detail {

struct JpegBatchDecoder::Impl {};

JpegBatchDecoder::JpegBatchDecoder(int) {
  throw Error("cannot decode JPEGs on the GPU: " + nvjpeg_status().text, "data.decode");
}
JpegBatchDecoder::~JpegBatchDecoder() = default;
const char* JpegBatchDecoder::backend() const { return "none"; }
bool JpegBatchDecoder::roi() const { return false; }
bool JpegBatchDecoder::supports(const uint8_t*, size_t) { return false; }
std::vector<size_t> JpegBatchDecoder::run(const std::vector<GpuJpeg>&, const std::vector<int32_t>&,
                                          int64_t, uint8_t*, void*) {
  throw Error("cannot decode JPEGs on the GPU: " + nvjpeg_status().text, "data.decode");
}

void JpegBatchDecoder::upload(const std::vector<int64_t>&, const uint8_t*, int64_t, uint8_t*,
                              void*) {
  throw Error("cannot decode JPEGs on the GPU: " + nvjpeg_status().text, "data.decode");
}

}  // namespace dtrain::detail
