// Where the unit tests find the repository, the reference Python and the stand-in NVML: defined
// in test_paths.cpp alone, the one source compiled with these absolute paths, so that the other
// tests compile the same in every clone of the repository (and ccache serves them from another's).
#pragma once

namespace dtrain::test {

const char* source_dir();  // the repository's root
const char* test_dir();    // its tests/ folder
const char* ref_python();  // the Python with PyTorch for reference values (Debian's python3-torch)
const char* fake_nvml();   // tests/fake_nvml's library for the unit tests

}  // namespace dtrain::test
