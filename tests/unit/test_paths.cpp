#include "test_paths.h"

namespace dtrain::test {

const char* source_dir() { return DTRAIN_SOURCE_DIR; }
const char* test_dir() { return DTRAIN_TEST_DIR; }
const char* ref_python() { return DTRAIN_REF_PYTHON; }
const char* fake_nvml() { return DTRAIN_FAKE_NVML; }

}  // namespace dtrain::test
