// JPEG batches decoded by nvJPEG and resampled on the GPU (data.decode: gpu,
// src/data/images/gpu_decode.h). Raw pointers and a cudaStream_t passed as void*: no LibTorch and
// no CUDA header here, so a CPU build compiles the same declarations against
// src/cuda/stub/jpeg_batch.cpp, which answers that there is no nvJPEG. In a CUDA build nvJPEG is
// loaded at run time (dlopen, Note [nvJPEG at run time] in src/cuda/nvjpeg.h): a machine without
// libnvjpeg runs, and data.decode auto says why it decodes on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dtrain::detail {

// Whether this process can decode JPEGs on the GPU: `usable` with the library's version
// ("nvJPEG 13.0.1") in `text`, or not with the reason (a CPU build, no libnvjpeg, a missing entry
// point). Looked up once.
struct NvjpegStatus {
  bool usable = false;
  std::string text;
};
NvjpegStatus nvjpeg_status();

// The bytes the GPU decoders of this process hold now, every thread's together: device memory
// (their buffers and what nvJPEG allocated through them) and page-locked host memory.
struct DecodeMemory {
  int64_t device = 0, pinned = 0;
  // The allocations made so far, each kind (a decoder that allocates per batch shows here: a
  // device allocation waits for the GPU).
  int64_t device_allocations = 0, pinned_allocations = 0;
};
DecodeMemory decode_memory();

// One JPEG of a batch and how it becomes size x size pixels: nvJPEG decodes the image at full
// size into its Y, Cb and Cr planes (src/cuda/resample_pixel.h's jpeg_planes(): 1.5 bytes a
// pixel for 4:2:0 where interleaved RGB takes 3, and no conversion pass of nvJPEG's own), whole,
// or only the box (roi_x, roi_y, roi_width, roi_height) when roi_width > 0 (jpeg_roi() in
// src/cuda/jpeg_roi.h; left and top then count from the box's corner), then
// two passes of PIL's bilinear filter (the taps of src/data/images/image_transforms.h, computed on
// the host) read the region [left, left + ...) x [top, ...) of it, converting each pixel to RGB as
// libjpeg-turbo does: a horizontal pass over the region's rows [rows_first, rows_end) into size
// columns, then a vertical pass into size rows, written as 3 planes (R, G, B), mirrored when
// `flip`. The tap table holds, at `taps`: for the size output columns first[size], count[size],
// weights[size * h_ksize], then for the size output rows first[size], count[size],
// weights[size * v_ksize]; a column's `first` counts from `left`, a row's from `top`.
struct GpuJpeg {
  const uint8_t* data = nullptr;  // the file's bytes (host memory, alive until run() returns)
  size_t size = 0;
  int32_t width = 0, height = 0;  // the whole image, from its header
  int32_t planes = 3;             // 1 for a grayscale JPEG
  // Cb's and Cr's subsampling against Y as shifts (4:2:0: 1 and 1; 4:2:2: 1 and 0; 4:4:4: 0).
  int32_t shift_x[2] = {0, 0}, shift_y[2] = {0, 0};
  int32_t left = 0, top = 0;
  // The box nvJPEG decodes, in the whole image's pixels; roi_width 0: the whole image.
  int32_t roi_x = 0, roi_y = 0, roi_width = 0, roi_height = 0;
  int32_t rows_first = 0, rows_end = 0;
  int32_t h_ksize = 0, v_ksize = 0;
  int64_t taps = 0;  // offset of this image's taps in the table (int32 elements)
  int64_t slot = 0;  // its place in the batch: out + slot * 3 * size * size
  bool flip = false;
};

// One loader thread's decoder on one device: an nvJPEG handle (its hardware backend where the
// GPU has JPEG engines, its CUDA backend otherwise), a decoding state, and buffers reused from
// batch to batch. A batch is decoded in chunks that fit the device buffer (64 MiB, more only for
// a single image larger than that), so the memory is bounded by the largest image, not by the
// batch: after every file has been seen once (an epoch) it no longer grows. Everything is freed
// by the destructor. Not thread-safe: one per thread.
class JpegBatchDecoder {
 public:
  explicit JpegBatchDecoder(int device);  // an Error when nvjpeg_status() is not usable
  ~JpegBatchDecoder();
  JpegBatchDecoder(const JpegBatchDecoder&) = delete;
  JpegBatchDecoder& operator=(const JpegBatchDecoder&) = delete;

  // "hardware" (the GPU's JPEG engines) or "CUDA" (nvJPEG's CUDA decoder).
  const char* backend() const;
  // Whether run() decodes only the box of an image whose roi_width is set (the hardware decoder,
  // with nvJPEG's nvjpegDecodeBatchedEx and its decode parameters' ROI); where not, the caller
  // leaves roi_width 0 and every image is decoded whole.
  bool roi() const;
  // Whether this decoder can take the JPEG: with the hardware backend, nvJPEG's own verdict on
  // the parsed stream (nvjpegDecodeBatchedSupported); the CUDA backend takes every stream the
  // caller's frame check passed (src/data/images/gpu_decode.cpp).
  bool supports(const uint8_t* data, size_t size);
  // Decodes and resamples `images` into `out` (device memory, N x 3 x size x size uint8) on
  // `stream` (a cudaStream_t), and returns once that work is done (the caller's buffers may be
  // reused and `out` read from any stream). The indices of the images nvJPEG refused (a chunk
  // whose batched decode failed: every image in it) are returned; their slots are not written.
  std::vector<size_t> run(const std::vector<GpuJpeg>& images, const std::vector<int32_t>& taps,
                          int64_t size, uint8_t* out, void* stream);
  // Copies the 3 x size x size planes of the samples decoded on the host into their slots of
  // `out` (planes + slot * 3 * size * size, host memory) on `stream`, through the pinned staging
  // buffer, and returns once they are there.
  void upload(const std::vector<int64_t>& slots, const uint8_t* planes, int64_t size, uint8_t* out,
              void* stream);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dtrain::detail
