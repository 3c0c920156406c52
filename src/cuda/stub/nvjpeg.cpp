// CPU build: no CUDA, so no nvJPEG; data.decode auto decodes on the CPU and gpu is an error
// naming the key. No decoder ever holds memory.
#include "cuda/jpeg_batch.h"

namespace dtrain::detail {

NvjpegStatus nvjpeg_status() { return {false, "this dtrain is a CPU build (no CUDA, no nvJPEG)"}; }

DecodeMemory decode_memory() { return {}; }

}  // namespace dtrain::detail
