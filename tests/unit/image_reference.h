// The image tests' reference: images written by PIL and the pixels PIL makes of them
// (tests/unit/image_reference.py, run in DTRAIN_REF_PYTHON with Debian's python3-pil).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "test_paths.h"
#include "test_support.h"

namespace dtrain::test {

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
}

inline std::string pil_failure(const std::string& what, const PythonRun& run) {
  return what + " failed in " + std::string(dtrain::test::ref_python()) + " (status " +
         std::to_string(run.status) +
         "). Install Debian's python3-pil (apt-get install python3-pil).\nstdout:\n" +
         run.output.substr(0, 2000) + "\nstderr:\n" + run.errors.substr(0, 4000);
}

// The script as text, so that run_python can run it (it writes its argument to a file).
inline std::string reference_script() {
  return read_text(std::string(dtrain::test::test_dir()) + "/unit/image_reference.py");
}

class ImageReference {
 public:
  // The images (made once per test binary): name -> (width, height). `ok()` false: `error()`.
  static const ImageReference& get() {
    static const ImageReference r;
    return r;
  }
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  std::string path(const std::string& name) const { return dir_.file(name); }
  std::pair<int64_t, int64_t> size(const std::string& name) const { return sizes_.at(name); }
  std::vector<uint8_t> pixels(const std::string& name) const {
    return read_bytes(dir_.file(name + ".rgb"));
  }

  // PIL's output of each job ("OP FILE ARGS...", image_reference.py run), in order.
  std::vector<std::vector<uint8_t>> run(const std::vector<std::string>& jobs) const {
    TempDir work;
    std::string text;
    for (size_t i = 0; i < jobs.size(); ++i)
      text += work.file("out" + std::to_string(i)) + " " + jobs[i] + "\n";
    std::ofstream(work.file("jobs.txt")) << text;
    const PythonRun r = run_python(work, reference_script(), "run '" + work.file("jobs.txt") + "'");
    EXPECT_EQ(r.status, 0) << pil_failure("image_reference.py run", r);
    std::vector<std::vector<uint8_t>> out;
    for (size_t i = 0; i < jobs.size(); ++i)
      out.push_back(read_bytes(work.file("out" + std::to_string(i))));
    return out;
  }

 private:
  ImageReference() {
    const PythonRun r = run_python(dir_, reference_script(), "make '" + dir_.path() + "'");
    if (r.status != 0) {
      error_ = pil_failure("image_reference.py make", r);
      return;
    }
    std::istringstream lines(r.output);
    std::string name;
    int64_t w = 0, h = 0;
    while (lines >> name >> w >> h) sizes_[name] = {w, h};
    if (sizes_.empty()) error_ = pil_failure("image_reference.py make (no images listed)", r);
  }
  TempDir dir_;
  std::map<std::string, std::pair<int64_t, int64_t>> sizes_;
  std::string error_;
};

// Largest |a - b| over two equally long byte strings (256 when the lengths differ).
inline int max_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return 256;
  int m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(int{a[i]} - int{b[i]}));
  return m;
}

inline double mean_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size() || a.empty()) return 256;
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += std::abs(int{a[i]} - int{b[i]});
  return s / static_cast<double>(a.size());
}

// augment_reference.py (torchvision's automatic augmentation and erase) run in `dir` with `args`:
// its standard output; a failure fails the calling test, naming the script's command.
inline std::string augment_python(const TempDir& dir, const std::string& args) {
  const std::string script = read_text(std::string(test_dir()) + "/unit/augment_reference.py");
  const PythonRun r = run_python(dir, script, args);
  EXPECT_EQ(r.status, 0) << python_failure("augment_reference.py " + args.substr(0, args.find(' ')),
                                           r);
  return r.output;
}

}  // namespace dtrain::test
