// data.decode: where an image folder's JPEGs are decoded and transformed (Note [GPU decoding]).
#pragma once

#include <ATen/ATen.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/jpeg_batch.h"
#include "data/images/image_transforms.h"
#include "dtrain/config.h"

namespace dtrain::detail {

// Note [GPU decoding]: with data.decode gpu the image folder's loader threads only read the
// files and their headers and draw each sample's crop and flip (the CPU path's draws, from
// (run.seed, epoch, index)); nvJPEG decodes the JPEGs of the batch on the GPU (its batched decoder:
// the hardware JPEG engines where the GPU has them, its CUDA decoder otherwise) at full size into
// their Y, Cb and Cr planes, each image whole or, with the hardware decoder where nvJPEG decodes
// regions, only the MCU-aligned box around what its crop reads (src/cuda/jpeg_roi.h: a
// random-resized crop keeps about half an image; the same bytes come out either way), and CUDA
// kernels convert them to RGB as libjpeg-turbo does
// (chroma replicated) and resample them with the CPU path's PIL bilinear taps (computed on the
// host by the same plan_taps and uploaded) into the uint8 (N, 3, S, S) batch on the device, which
// the loader hands on without a copy (Note [uint8 pixels]). The work runs on the loader thread's
// stream (src/cuda/streams.h) and the thread waits for it (a blocking wait), so the batch is ready
// on any stream and decoding overlaps the training step on the GPU; at most data.prefetch
// batches wait, as with the CPU path.
// The pixels: the CPU path with data.scaled_decode false decodes at full size too, so the two
// differ only by the decoders (nvJPEG's IDCT against libjpeg-turbo's, and chroma replicated
// against libjpeg-turbo's interpolating "fancy" upsampling; the color conversion is the same),
// a few levels (tests/gpu/test_gpu_decode.cpp states the bounds). libjpeg-turbo's scaled decoding
// has no nvJPEG counterpart: with data.scaled_decode true the CPU path decodes large photos at
// 1/2 .. 1/8 and the GPU path still decodes them at full size, so the two differ a little more (the
// bounds for that case are looser); the crops and flips are the same either way.
// Files nvJPEG does not take go through the CPU path, and are counted: PNGs; JPEGs that are not
// baseline or extended sequential Huffman with 8-bit samples and 1 or 3 components (progressive,
// arithmetic-coded, lossless, 12-bit, CMYK); JPEGs whose three components are RGB rather than
// YCbCr (libjpeg's rule: no JFIF marker, and an Adobe marker's transform 0 or the ids R, G, B) or
// whose chroma is not sampled at 1, 1/2 or 1/4 of the luma (the kernels convert YCbCr and
// replicate chroma by shifts); JPEGs without their end-of-image marker (a truncated
// file: libjpeg-turbo's error names it); and with the hardware decoder, the JPEGs it refuses
// (nvjpegDecodeBatchedSupported). A chunk whose batched decode fails goes through the CPU path as
// well, so a damaged JPEG is still an Error naming the file. Memory: one decoder per loader
// thread decoding at once, at most kGpuDecoders (GpuBatchPool), its buffers bounded
// (src/cuda/jpeg_batch.h), counted in the run's memory figures (metrics.jsonl's mem_decode).

// data.decode resolved for a rank on `device` whose loader can run `decoding_threads` threads at
// once (data.workers, at most the CPUs it may use but one): `gpu`, and why, for the log. gpu on a
// CPU device, or without a usable nvJPEG, is an Error naming data.decode. auto is the CPU on a CPU
// device, without nvJPEG, or with kCpuDecodeThreads threads or more; else the GPU. Why that many:
// on an H100 (docs/PERFORMANCE.md, 2026-12-06) the CPU path decodes and crops 460-560 images/s
// per thread, so ResNet-50's 6,000 images/s need 12 or more; with 15 threads it keeps up, while
// the GPU path, which takes GPU time from the step, runs 82-91% of that rate; with 8 threads or
// fewer the CPU path gives 47% or less and the GPU path 86-91%.
constexpr int kCpuDecodeThreads = 12;
struct DecodeChoice {
  bool gpu = false;
  std::string why;
};
DecodeChoice choose_decode(DecodeMode mode, const at::Device& device, int decoding_threads);
// The same with nvJPEG's status given (the rule alone, for tests).
DecodeChoice choose_decode(DecodeMode mode, const at::Device& device, int decoding_threads,
                           const NvjpegStatus& nvjpeg);

// What a JPEG's markers say up to its first frame header (SOFn): the frame's coding, sample
// precision, components with their ids and sampling factors, and the JFIF and Adobe markers that
// decide libjpeg's color space; `error` when the markers cannot be followed, `complete` once a
// frame header was read whole. `data` starts with the JPEG's FF D8 FF.
struct JpegFrame {
  int marker = 0;  // the SOFn code; 0 when none was met
  int precision = 0, components = 0;
  int id[4] = {}, h[4] = {}, v[4] = {};
  bool jfif = false;
  int adobe_transform = -1;  // an Adobe APP14's transform flag; -1 without one
  bool complete = false;
  std::string error;
};
JpegFrame jpeg_frame(const uint8_t* data, size_t n);

// Why nvJPEG cannot take this JPEG from its markers alone ("" when it can): see Note [GPU
// decoding].
std::string jpeg_refusal(const uint8_t* data, size_t n);

// `g`'s planes and chroma shifts (src/cuda/jpeg_batch.h) from its frame, which jpeg_refusal passed.
void set_planes(const JpegFrame& f, GpuJpeg& g);

// A sample's resampling for the GPU (Resampler::run's plan on a width x height image, its window
// size x size): its GpuJpeg, without the bytes and the slot, and its taps appended to `taps` in
// src/cuda/jpeg_batch.h's layout; `h` and `v` are scratch.
GpuJpeg gpu_jpeg(int64_t width, int64_t height, const ResamplePlan& plan, int64_t size,
                 std::vector<int32_t>& taps, ResampleTaps& h, ResampleTaps& v);

// One batch for the GPU, as one loader thread builds it. Reused from batch to batch: its host
// buffers grow to the largest batch and stay.
class GpuImageBatch {
 public:
  explicit GpuImageBatch(const at::Device& device);
  ~GpuImageBatch();

  // A new batch of n samples, size x size each.
  void start(int64_t n, int64_t size);
  // Sample k's file buffer (its bytes are read into it).
  std::vector<uint8_t>& bytes(int64_t k);
  // Why sample k's bytes (n of them, a JPEG) go to the CPU ("" when nvJPEG takes them).
  std::string refusal(int64_t k, size_t n);
  // Sample k through nvJPEG: the whole width x height image, decoded, then resampled by `plan`
  // (Resampler::run's, its window size x size).
  void add(int64_t k, size_t n, int64_t width, int64_t height, const ResamplePlan& plan);
  // Sample k's 3 x size x size planes, for the CPU path to fill.
  uint8_t* planes(int64_t k);
  // Runs the batch: the device tensor (N, 3, size, size). The samples nvJPEG refused are loaded
  // by `cpu(k, planes(k))` (which throws for a damaged file); `refused` counts them. Every
  // sample not add()ed must have its planes filled.
  at::Tensor finish(const std::function<void(int64_t, uint8_t*)>& cpu, int64_t& refused);
  const char* backend() const;

 private:
  at::Device device_;
  std::unique_ptr<JpegBatchDecoder> decoder_;
  int64_t n_ = 0, size_ = 0;
  std::vector<std::vector<uint8_t>> bytes_;
  std::vector<uint8_t> planes_;
  std::vector<bool> on_gpu_;
  std::vector<GpuJpeg> jpegs_;
  std::vector<int32_t> taps_;
  ResampleTaps h_, v_;
};

// GpuImageBatch objects lent to the threads that fetch at once (the loader's workers), each kept
// for the next fetch and freed with the pool: as many as threads ever decoded together, at most
// `most`; take() waits while that many are lent. Why a limit: each decoder holds 64 MiB of device
// memory (0.94 GiB for 15 loader threads on an H100), and more decoders than a few only compete
// with the training step for the GPU: ResNet-50 on 16 cores ran 5,313 / 5,414 / 5,146 / 5,182
// images/s with 2 / 4 / 8 / 15 loader threads decoding on the GPU (docs/PERFORMANCE.md,
// 2026-12-06). The threads read their files before they take one, so reading stays parallel.
constexpr int kGpuDecoders = 4;
class GpuBatchPool {
 public:
  explicit GpuBatchPool(const at::Device& device, int most = kGpuDecoders)
      : device_(device), most_(most) {}
  class Lease {
   public:
    Lease(GpuBatchPool& pool, std::unique_ptr<GpuImageBatch> batch)
        : pool_(pool), batch_(std::move(batch)) {}
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    GpuImageBatch& operator*() const { return *batch_; }
    GpuImageBatch* operator->() const { return batch_.get(); }

   private:
    GpuBatchPool& pool_;
    std::unique_ptr<GpuImageBatch> batch_;
  };
  Lease take();
  // Decoders made so far (lent or idle): at most `most`.
  int made() const;

 private:
  at::Device device_;
  const int most_;
  mutable std::mutex mu_;
  std::condition_variable returned_;
  int made_ = 0;
  std::vector<std::unique_ptr<GpuImageBatch>> idle_;
};

}  // namespace dtrain::detail
