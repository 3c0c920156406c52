// The source tree keeps the rules its headers and docs state (docs/ARCHITECTURE.md):
//   - LibTorch version tests live only in src/util/torch_compat.{h,cpp};
//   - CUDA-only code lives in src/cuda/ and src/comm/nccl_comm.cpp; no source tests for CUDA with
//     the preprocessor (CMake picks src/cuda/stub/ for CPU builds);
//   - nothing in the library reads the environment (tests set seams such as FaultInjector); the
//     program's src/cli/main.cpp alone reads the launcher's variables and hands them in;
//   - include/dtrain/ is the public API: its headers include no internal header;
//   - no source file is over 500 lines.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

namespace {

const std::string kRoot = DTRAIN_SOURCE_DIR;

// Every file under `dir` (relative to the repository root) whose name ends in one of `exts`.
std::vector<std::string> files_under(const std::string& dir, const std::vector<std::string>& exts) {
  std::vector<std::string> out;
  std::vector<std::string> todo = {dir};
  while (!todo.empty()) {
    const std::string d = todo.back();
    todo.pop_back();
    DIR* h = opendir((kRoot + "/" + d).c_str());
    if (!h) continue;
    while (dirent* e = readdir(h)) {
      const std::string name = e->d_name;
      if (name == "." || name == "..") continue;
      const std::string rel = d + "/" + name;
      struct stat st {};
      if (stat((kRoot + "/" + rel).c_str(), &st) != 0) continue;
      if (S_ISDIR(st.st_mode)) {
        todo.push_back(rel);
        continue;
      }
      for (const auto& ext : exts)
        if (name.size() > ext.size() && name.compare(name.size() - ext.size(), ext.size(), ext) == 0)
          out.push_back(rel);
    }
    closedir(h);
  }
  return out;
}

std::vector<std::string> sources() {
  std::vector<std::string> all = files_under("src", {".cpp", ".h", ".cu"});
  const auto inc = files_under("include", {".h"});
  all.insert(all.end(), inc.begin(), inc.end());
  return all;
}

std::string read(const std::string& rel) {
  std::ifstream in(kRoot + "/" + rel);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// Lines of `rel` that match `pattern`, as "file:line: text".
std::vector<std::string> matches(const std::string& rel, const std::regex& pattern) {
  std::vector<std::string> out;
  std::istringstream in(read(rel));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    if (std::regex_search(line, pattern)) out.push_back(rel + ":" + std::to_string(n) + ": " + line);
  return out;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += "\n  " + x;
  return s;
}

TEST(Tree, TheSourcesAreThere) {
  // Guards the tests below against passing on an empty tree.
  EXPECT_GT(sources().size(), 60u);
  EXPECT_FALSE(read("src/train/trainer.cpp").empty());
}

TEST(Tree, VersionTestsOnlyInTheCompatFiles) {
  const std::regex version(R"(TORCH_VERSION_|DTRAIN_TORCH_AT_LEAST)");
  std::vector<std::string> found;
  for (const auto& f : sources()) {
    if (f == "src/util/torch_compat.h" || f == "src/util/torch_compat.cpp") continue;
    const auto m = matches(f, version);
    found.insert(found.end(), m.begin(), m.end());
  }
  EXPECT_TRUE(found.empty()) << "LibTorch version tests outside src/util/torch_compat:" << joined(found);
  EXPECT_FALSE(matches("src/util/torch_compat.h", version).empty());
}

TEST(Tree, CudaOnlyCodeStaysInItsFolders) {
  const std::regex cuda_if(R"(^\s*#\s*(if|elif|ifdef|ifndef)\b.*(DTRAIN_WITH_CUDA|__CUDACC__|USE_CUDA))");
  const std::regex cuda_include(R"(#include\s*[<"](c10/cuda/|ATen/cuda/|cuda_runtime|cuda\.h|nccl\.h))");
  std::vector<std::string> ifs, includes;
  for (const auto& f : sources()) {
    auto m = matches(f, cuda_if);
    ifs.insert(ifs.end(), m.begin(), m.end());
    const bool cuda_file = (starts_with(f, "src/cuda/") && !starts_with(f, "src/cuda/stub/")) ||
                           f == "src/comm/nccl_comm.cpp";
    if (cuda_file) continue;
    m = matches(f, cuda_include);
    includes.insert(includes.end(), m.begin(), m.end());
  }
  EXPECT_TRUE(ifs.empty()) << "preprocessor tests for CUDA (CMake picks src/cuda/stub/ instead):" << joined(ifs);
  EXPECT_TRUE(includes.empty()) << "CUDA headers outside src/cuda/ and src/comm/nccl_comm.cpp:" << joined(includes);
  // Every CUDA source has its CPU stand-in.
  for (const auto& f : files_under("src/cuda", {".cpp"})) {
    if (starts_with(f, "src/cuda/stub/")) continue;
    const std::string stub = "src/cuda/stub/" + f.substr(std::string("src/cuda/").size());
    EXPECT_FALSE(read(stub).empty()) << f << " has no CPU stand-in " << stub;
  }
}

TEST(Tree, TheLibraryDoesNotReadTheEnvironment) {
  const std::regex env(R"(\bgetenv\s*\(|\bsecure_getenv\s*\()");
  std::vector<std::string> found;
  for (const auto& f : sources()) {
    if (f == "src/cli/main.cpp") continue;  // the program, not the library
    const auto m = matches(f, env);
    found.insert(found.end(), m.begin(), m.end());
  }
  EXPECT_TRUE(found.empty()) << "environment reads in the library:" << joined(found);
}

TEST(Tree, PublicHeadersIncludeOnlyPublicHeaders) {
  const std::regex internal(R"(#include\s*"(?!dtrain/)[^"]*")");
  std::vector<std::string> found;
  for (const auto& f : files_under("include", {".h"})) {
    const auto m = matches(f, internal);
    found.insert(found.end(), m.begin(), m.end());
  }
  EXPECT_TRUE(found.empty()) << "public headers that include internal ones:" << joined(found);
}

TEST(Tree, NoSourceFileIsOver500Lines) {
  std::vector<std::string> big;
  for (const auto& f : sources()) {
    const std::string text = read(f);
    const long lines = std::count(text.begin(), text.end(), '\n');
    if (lines > 500) big.push_back(f + " (" + std::to_string(lines) + " lines)");
  }
  EXPECT_TRUE(big.empty()) << "files over 500 lines (one concept each):" << joined(big);
}

}  // namespace
