// Helpers shared by the unit tests: a temporary directory, a hook's run, an image folder's data
// spec, small file writers, the message of a thrown dtrain::Error, and running a reference script
// in DTRAIN_REF_PYTHON (Debian's python3-torch). POSIX calls, not std::filesystem: the pip wheels
// of LibTorch 2.x export their own std::filesystem symbols.
#pragma once

#include <ftw.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <stdexcept>
#include <string>
#include <vector>

#include "dtrain/config.h"
#include "dtrain/data/dataset.h"
#include "dtrain/error.h"
#include "dtrain/hooks.h"
#include "test_paths.h"

namespace dtrain::test {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl =
        std::string(base != nullptr && *base != 0 ? base : "/tmp") + "/dtrain-test-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + tmpl);
    path_ = tmpl;
  }
  ~TempDir() { nftw(path_.c_str(), &TempDir::remove_entry, 16, FTW_DEPTH | FTW_PHYS); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  static int remove_entry(const char* p, const struct stat*, int, struct FTW*) {
    return ::remove(p);
  }
  std::string path_;
};

// What a hook's on_start() gets in a test: the default config resolved for `world` ranks, the
// RunInfo naming it (rank 0 of `world`, the run directory "run" in a fresh TempDir, not made
// yet) and a LoopControl.
struct HookRun {
  TempDir dir;
  Config cfg;
  RunInfo info;
  LoopControl control;
  explicit HookRun(int world = 1) {
    cfg.resolve(world);
    info.config = &cfg;
    info.world = world;
    info.run_dir = dir.file("run");
  }
};

// The DataSpec of a small image folder as preprocess.json records it: 3x32x32 images of two
// classes (cat, dog) resized to 36, with ImageNet's channel statistics.
inline DataSpec folder_spec() {
  DataSpec s;
  s.input_shape = {3, 32, 32};
  s.num_classes = 2;
  s.pixel_mean = {0.485, 0.456, 0.406};
  s.pixel_std = {0.229, 0.224, 0.225};
  s.recipe.class_names = {"cat", "dog"};
  s.recipe.resize = 36;
  return s;
}

// The enum of a synthetic task named as a config file names it ("classification").
inline SyntheticTask task_of(const std::string& name) {
  return Config::from_string("data: {synthetic_task: " + name + "}\n").data.synthetic_task;
}

inline bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// The whole file as text; empty when it cannot be read.
inline std::string read_text(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

inline void write_gzip(const std::string& path, const std::vector<unsigned char>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(f), Z_OK);
}

// Each of `parts` is somewhere in `msg` (a failure names the part and the whole message).
inline void expect_all(const std::string& msg, const std::vector<std::string>& parts) {
  for (const auto& p : parts)
    EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' in: " << msg;
}

// What fn throws: a dtrain::Error's message, or a marker saying it threw something else or
// nothing.
inline std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const dtrain::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("NOT A dtrain::Error: ") + e.what();
  }
  return "NO EXCEPTION";
}

struct PythonRun {
  int status = -1;     // pclose's status; -1 when popen failed
  std::string output;  // stdout
  std::string errors;  // stderr
};

// Writes script_text to `dir`/reference.py and runs it in DTRAIN_REF_PYTHON with `args` (already
// shell-quoted) appended; stderr goes through `dir`/stderr.txt.
inline PythonRun run_python(const TempDir& dir, const std::string& script_text,
                            const std::string& args) {
  const std::string script = dir.file("reference.py");
  {
    std::ofstream f(script);
    f << script_text;
  }
  const std::string errors = dir.file("stderr.txt");
  const std::string cmd = "'" + std::string(dtrain::test::ref_python()) + "' '" + script + "' " +
                          args + " 2>'" + errors + "'";
  PythonRun run;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) run.output.append(buf, n);
    run.status = pclose(p);
  }
  run.errors = read_text(errors);
  return run;
}

// The failure message for a reference script that did not finish: says which Debian package to
// install (python3-torchvision where torchvision is what failed to import, else python3-torch),
// then shows the start of its stdout and stderr.
inline std::string python_failure(const std::string& what, const PythonRun& run) {
  const std::string python = dtrain::test::ref_python();
  const bool vision = run.errors.find("No module named 'torchvision'") != std::string::npos;
  const std::string package = vision ? "python3-torchvision" : "python3-torch";
  return what + " failed in " + python + " (status " + std::to_string(run.status) +
         "). Install Debian's " + package + " (apt-get install " + package +
         "; bash launch/setup.sh test installs it) so that " + python + " can import " +
         (vision ? "torchvision" : "torch") + ".\nstdout:\n" + run.output.substr(0, 2000) +
         "\nstderr:\n" + run.errors.substr(0, 4000);
}

}  // namespace dtrain::test
