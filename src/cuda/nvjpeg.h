// The part of nvJPEG's C API that dtrain uses, declared here and loaded with dlopen/dlsym (CUDA
// builds only; src/cuda/jpeg_batch.cpp is its one user).
//
// Note [nvJPEG at run time]: dtrain does not link libnvjpeg and does not include nvjpeg.h, which
// a CUDA toolkit or a LibTorch wheel may lack. The types, enum values and signatures below are
// copied from NVIDIA's nvjpeg.h (nvJPEG 11.6, CUDA 11.6; the same in nvJPEG 12 and 13, whose
// headers only add values and functions: the C ABI of these is stable). The library is opened
// as libnvjpeg.so.<CUDA major> of the CUDA runtime dtrain runs with (from the loader's path, else
// beside that runtime's library, as the pip wheels lay them out), or libnvjpeg.so; every entry
// point must resolve, else nvJPEG counts as absent and data.decode auto decodes on
// the CPU, saying which one was missing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace dtrain::detail::nvjpeg {

using Status = int;  // nvjpegStatus_t
constexpr Status kSuccess = 0;

// nvjpegBackend_t
constexpr int kBackendDefault = 0;
constexpr int kBackendHardware = 3;
// nvjpegOutputFormat_t: the Y, Cb and Cr planes in channel[0..2] at their own sizes (Y alone for
// a grayscale JPEG), as decoded, without color conversion
constexpr int kOutputYuv = 1;
// libraryPropertyType (library_types.h)
constexpr int kMajorVersion = 0, kMinorVersion = 1, kPatchLevel = 2;

constexpr int kMaxComponent = 4;  // NVJPEG_MAX_COMPONENT
struct Image {                    // nvjpegImage_t
  unsigned char* channel[kMaxComponent];
  size_t pitch[kMaxComponent];
};
struct DevAllocator {  // nvjpegDevAllocator_t
  int (*dev_malloc)(void**, size_t);
  int (*dev_free)(void*);
};
struct PinnedAllocator {  // nvjpegPinnedAllocator_t
  int (*pinned_malloc)(void**, size_t, unsigned int);
  int (*pinned_free)(void*);
};

using Handle = void*;        // nvjpegHandle_t
using State = void*;         // nvjpegJpegState_t
using Stream = void*;        // nvjpegJpegStream_t
using DecodeParams = void*;  // nvjpegDecodeParams_t

struct Api {
  Status (*get_property)(int type, int* value);
  Status (*create_ex)(int backend, DevAllocator* dev, PinnedAllocator* pinned, unsigned flags,
                      Handle* handle);
  Status (*destroy)(Handle handle);
  Status (*state_create)(Handle handle, State* state);
  Status (*state_destroy)(State state);
  Status (*batched_initialize)(Handle handle, State state, int batch_size, int max_cpu_threads,
                               int output_format);
  Status (*batched)(Handle handle, State state, const unsigned char* const* data,
                    const size_t* lengths, Image* destinations, cudaStream_t stream);
  Status (*stream_create)(Handle handle, Stream* stream);
  Status (*stream_destroy)(Stream stream);
  Status (*stream_parse)(Handle handle, const unsigned char* data, size_t length, int save_metadata,
                         int save_stream, Stream stream);
  Status (*batched_supported)(Handle handle, Stream stream, int* is_supported);
  // nvjpegJpegStreamParseHeader: the markers up to the first scan only, what
  // nvjpegDecodeBatchedSupported needs (NVIDIA's hardware-decode sample and DALI parse so);
  // null where the library lacks it (then stream_parse).
  Status (*stream_parse_header)(Handle handle, const unsigned char* data, size_t length,
                                Stream stream);
  // The batched decode of a region of each image (nvJPEG 11.6 and later: nvjpegDecodeBatchedEx
  // with per-image nvjpegDecodeParams_t, the ROI set by nvjpegDecodeParamsSetROI; 0, 0, -1, -1 is
  // the whole image); all four null where the library lacks one of them (then whole images).
  Status (*params_create)(Handle handle, DecodeParams* params);
  Status (*params_destroy)(DecodeParams params);
  Status (*params_set_roi)(DecodeParams params, int offset_x, int offset_y, int width, int height);
  Status (*batched_ex)(Handle handle, State state, const unsigned char* const* data,
                       const size_t* lengths, Image* destinations, DecodeParams* params,
                       cudaStream_t stream);
  // nvjpegDecodeBatchedPreAllocate (nvJPEG 11.6 and later; null where absent): the hardware
  // decoder's memory pool for batches up to the given size, so that it does not allocate device
  // memory (which waits for the GPU) batch after batch.
  Status (*batched_pre_allocate)(Handle handle, State state, int batch_size, int width, int height,
                                 int chroma_subsampling, int output_format);
};
// nvjpegChromaSubsampling_t
constexpr int kCss444 = 0;

// The loaded library (null when absent) and, either way, what nvjpeg_status() reports.
const Api* api();
const std::string& api_text();

// The allocators nvJPEG allocates through: cudaMalloc and cudaHostAlloc, counted in
// decode_memory() (src/cuda/jpeg_batch.h).
DevAllocator* counted_device_allocator();
PinnedAllocator* counted_pinned_allocator();
// dtrain's own buffers for the decoders, counted alike; null on failure (a CUDA error).
void* device_alloc(size_t bytes);
void device_free(void* p);
void* pinned_alloc(size_t bytes);
void pinned_free(void* p);

// nvjpegStatus_t's names, for error messages.
std::string status_name(Status s);

}  // namespace dtrain::detail::nvjpeg
