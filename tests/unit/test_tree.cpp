// The source tree keeps the rules its headers and docs state (docs/ARCHITECTURE.md):
//   - every source under src/ is named in ARCHITECTURE.md's module map, in its folder's row;
//   - every Note [x] is defined once (a comment that opens with "Note [x]:"), cited elsewhere,
//     and listed in ARCHITECTURE.md's index with the file that defines it;
//   - every repository path that README.md and docs/ name in code spans exists;
//   - every relative link of README.md and docs/ leads to a file (and heading) that exists, and
//     README.md links every page of docs/;
//   - an include of another folder's header points down ARCHITECTURE.md's folder order;
//   - LibTorch version tests live only in src/util/torch_compat.{h,cpp};
//   - CUDA-only code lives in src/cuda/ and src/comm/nccl_comm.cpp; no source tests for CUDA with
//     the preprocessor (CMake picks src/cuda/stub/ for CPU builds);
//   - outside src/data/formats/, no source asks which data format a config has: it looks the
//     format up (Note [data formats]);
//   - nothing in the library reads the environment (tests set seams such as FaultInjector); the
//     program's src/cli/main.cpp alone reads the launcher's variables and hands them in;
//   - include/dtrain/ is the public API: its headers include no internal header;
//   - no source or test file is over 500 lines.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>
#include "test_paths.h"

namespace {

const std::string kRoot = dtrain::test::source_dir();

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
        if (name.size() > ext.size() &&
            name.compare(name.size() - ext.size(), ext.size(), ext) == 0)
          out.push_back(rel);
    }
    closedir(h);
  }
  return out;
}

std::vector<std::string> sources() {
  std::vector<std::string> all = files_under("src", {".cpp", ".h", ".cu", ".cuh"});
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

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.rfind(prefix, 0) == 0;
}

// Lines of `rel` that match `pattern`, as "file:line: text".
std::vector<std::string> matches(const std::string& rel, const std::regex& pattern) {
  std::vector<std::string> out;
  std::istringstream in(read(rel));
  std::string line;
  for (int n = 1; std::getline(in, line); ++n)
    if (std::regex_search(line, pattern))
      out.push_back(rel + ":" + std::to_string(n) + ": " + line);
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
  EXPECT_TRUE(found.empty()) << "LibTorch version tests outside src/util/torch_compat:"
                             << joined(found);
  EXPECT_FALSE(matches("src/util/torch_compat.h", version).empty());
}

TEST(Tree, CudaOnlyCodeStaysInItsFolders) {
  const std::regex cuda_if(
      R"(^\s*#\s*(if|elif|ifdef|ifndef)\b.*(DTRAIN_WITH_CUDA|__CUDACC__|USE_CUDA))");
  const std::regex cuda_include(
      R"(#include\s*[<"](c10/cuda/|ATen/cuda/|cuda_runtime|cuda\.h|nccl\.h))");
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
  EXPECT_TRUE(ifs.empty()) << "preprocessor tests for CUDA (CMake picks src/cuda/stub/ instead):"
                           << joined(ifs);
  EXPECT_TRUE(includes.empty()) << "CUDA headers outside src/cuda/ and src/comm/nccl_comm.cpp:"
                                << joined(includes);
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

TEST(Tree, OnlyAFormatsOwnFileAsksWhichFormatItIs) {
  // Note [data formats]: outside its own file in src/data/formats/, a data format is looked up
  // (its registration, its row in src/config/data_formats.cpp), never compared or switched on.
  const std::regex asks(R"((==|!=|case)\s*DataFormat::k|DataFormat::k\w+\s*(==|!=))");
  std::vector<std::string> found;
  for (const auto& f : sources()) {
    if (starts_with(f, "src/data/formats/")) continue;
    const auto m = matches(f, asks);
    found.insert(found.end(), m.begin(), m.end());
  }
  EXPECT_TRUE(found.empty()) << "a data format asked for outside its own file:" << joined(found);
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
  std::vector<std::string> files = sources();
  const auto tests = files_under("tests", {".cpp", ".h", ".cu", ".sh", ".py"});
  files.insert(files.end(), tests.begin(), tests.end());
  for (const auto& f : files) {
    const std::string text = read(f);
    const long lines = std::count(text.begin(), text.end(), '\n');
    if (lines > 500) big.push_back(f + " (" + std::to_string(lines) + " lines)");
  }
  EXPECT_TRUE(big.empty()) << "files over 500 lines (one concept each):" << joined(big);
}

// ---- the docs against the tree ------------------------------------------------------------

// The lines of `rel`.
std::vector<std::string> lines_of(const std::string& rel) {
  std::vector<std::string> out;
  std::istringstream in(read(rel));
  std::string line;
  while (std::getline(in, line)) out.push_back(line);
  return out;
}

// ARCHITECTURE.md's module map: each folder's row ("| `src/cli/` | ... |", "| `src/data/formats/` |
// ... |"), by folder.
std::map<std::string, std::string> module_map() {
  std::map<std::string, std::string> rows;
  const std::regex row(R"(^\| `(src/[a-z_]+/(?:[a-z_]+/)?)` \|)");
  for (const auto& line : lines_of("docs/ARCHITECTURE.md")) {
    std::smatch m;
    if (std::regex_search(line, m, row)) rows[m[1]] = line;
  }
  return rows;
}

TEST(Docs, EverySourceIsNamedInItsFoldersRowOfTheModuleMap) {
  const auto rows = module_map();
  ASSERT_GE(rows.size(), 14u) << "the module map's rows were not found in docs/ARCHITECTURE.md";
  std::vector<std::string> missing;
  for (const auto& f : files_under("src", {".cpp", ".cu", ".h", ".cuh"})) {
    if (starts_with(f, "src/cuda/stub/")) continue;  // the CPU stand-ins: "stub/ holds ..."
    const size_t slash = f.rfind('/');
    const std::string folder = f.substr(0, slash + 1), name = f.substr(slash + 1);
    const std::string stem = name.substr(0, name.find('.'));
    const auto it = rows.find(folder);
    if (it == rows.end()) {
      missing.push_back(f + " (no row for " + folder + ")");
      continue;
    }
    // Named as `stem.ext`, `stem.cpp` + `.cu`, or `stem` (a .h/.cpp pair named once).
    const std::string& row = it->second;
    if (row.find("`" + stem + ".") == std::string::npos &&
        row.find("`" + stem + "`") == std::string::npos)
      missing.push_back(f);
  }
  EXPECT_TRUE(missing.empty()) << "sources not named in docs/ARCHITECTURE.md's module map:"
                               << joined(missing);
}

// Every file that may define or cite a Note.
std::vector<std::string> note_files() {
  std::vector<std::string> all = sources();
  for (const char* dir : {"tests", "bench", "examples", "launch", "cmake", "python"}) {
    const auto more =
        files_under(dir, {".cpp", ".h", ".cu", ".sh", ".py", ".txt", ".cmake", ".yaml", ".md"});
    all.insert(all.end(), more.begin(), more.end());
  }
  all.push_back("CMakeLists.txt");
  all.push_back("README.md");
  return all;
}

TEST(Docs, EveryNoteIsDefinedOnceAndListedInTheIndexWhereItIsDefined) {
  const std::regex definition(R"(^\s*(//|#|\*)\s*Note \[([^\]]+)\]:)");
  const std::regex citation(R"(Note \[([^\]]+)\])");
  std::map<std::string, std::vector<std::string>> defined;  // note -> "file:line"
  std::map<std::string, std::string> cited;                 // note -> a file citing it
  for (const auto& f : note_files()) {
    if (f == "tests/unit/test_tree.cpp") continue;  // speaks of Notes in general
    const auto lines = lines_of(f);
    for (size_t i = 0; i < lines.size(); ++i) {
      std::smatch m;
      if (std::regex_search(lines[i], m, definition))
        defined[m[2]].push_back(f + ":" + std::to_string(i + 1));
      for (std::sregex_iterator it(lines[i].begin(), lines[i].end(), citation), end; it != end;
           ++it)
        cited.emplace((*it)[1], f);
    }
  }
  // The index: "| Note [x] | `file` |".
  std::map<std::string, std::string> index;
  const std::regex row(R"(^\| Note \[([^\]]+)\] \| `([^`]+)` \|)");
  for (const auto& line : lines_of("docs/ARCHITECTURE.md")) {
    std::smatch m;
    if (std::regex_search(line, m, row)) index[m[1]] = m[2];
  }
  ASSERT_GE(defined.size(), 10u);
  std::vector<std::string> wrong;
  for (const auto& [note, where] : defined) {
    if (where.size() > 1)
      wrong.push_back("Note [" + note + "] is defined " + std::to_string(where.size()) +
                      " times:" + joined(where));
    const std::string file = where.front().substr(0, where.front().find(':'));
    const auto it = index.find(note);
    if (it == index.end())
      wrong.push_back("Note [" + note + "] (" + file + ") is not in ARCHITECTURE.md's index");
    else if (it->second != file)
      wrong.push_back("Note [" + note + "]: the index says " + it->second + ", it is defined in " +
                      file);
  }
  for (const auto& [note, file] : cited)
    if (!defined.count(note))
      wrong.push_back("Note [" + note + "] is cited in " + file + " but defined nowhere");
  for (const auto& [note, file] : index)
    if (!defined.count(note))
      wrong.push_back("Note [" + note + "] is in the index but defined nowhere");
  EXPECT_TRUE(wrong.empty()) << joined(wrong);
}

// The folder that implements each public header, from ARCHITECTURE.md's table of them ("|
// `optim.h`, `amp.h` | `optim` | ..."): "dtrain/optim.h" -> "optim", "dtrain/data/" -> "data".
std::map<std::string, std::string> public_header_folders(const std::string& doc) {
  std::map<std::string, std::string> out;
  const std::regex row(R"(^\| ((?:`[a-z_/.]+`(?:, )?)+) \| `([a-z_]+)` \|)");
  const std::regex name("`([a-z_/.]+)`");
  std::istringstream lines(doc);
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch m;
    if (!std::regex_search(line, m, row)) continue;
    const std::string cell = m[1], folder = m[2];
    for (std::sregex_iterator it(cell.begin(), cell.end(), name), end; it != end; ++it)
      out["dtrain/" + (*it)[1].str()] = folder;
  }
  return out;
}

// The folder an include of a public header points to: its entry, or its folder's ("dtrain/data/").
std::string folder_of_public(const std::map<std::string, std::string>& folders,
                             const std::string& path) {
  if (folders.count(path)) return folders.at(path);
  const size_t slash = path.rfind('/');
  const auto dir = folders.find(path.substr(0, slash + 1));
  return dir == folders.end() ? std::string() : dir->second;
}

TEST(Tree, EveryPublicHeaderHasItsFolder) {
  const auto folders = public_header_folders(read("docs/ARCHITECTURE.md"));
  std::vector<std::string> missing;
  for (const auto& h : files_under("include/dtrain", {".h"}))
    if (folder_of_public(folders, h.substr(std::string("include/").size())).empty())
      missing.push_back(h);
  EXPECT_GE(folders.size(), 10u);
  EXPECT_TRUE(missing.empty()) << "public headers without a folder in ARCHITECTURE.md's table:"
                               << joined(missing);
}

TEST(Tree, IncludesPointDownTheFolderOrder) {
  // "Folder order: `cli` > `bench` > ... > `util`." in ARCHITECTURE.md, over one or more lines.
  // A public header (dtrain/...) counts as the folder that implements it.
  const std::string doc = read("docs/ARCHITECTURE.md");
  const auto publics = public_header_folders(doc);
  const size_t at = doc.find("Folder order:");
  ASSERT_NE(at, std::string::npos) << "ARCHITECTURE.md states no folder order";
  const std::string line = doc.substr(at, doc.find('.', at) - at);
  std::map<std::string, int> rank;  // higher folders first: a smaller number
  const std::regex folder("`([a-z_]+)`");
  for (std::sregex_iterator it(line.begin(), line.end(), folder), end; it != end; ++it)
    rank.emplace((*it)[1], static_cast<int>(rank.size()));
  std::vector<std::string> wrong;
  const std::regex include(R"re(^\s*#\s*include\s*"(([a-z_]+)/[a-z_/.]+)")re");
  for (const auto& f : files_under("src", {".cpp", ".h", ".cu", ".cuh"})) {
    const std::string mine = f.substr(4, f.find('/', 4) - 4);
    if (!rank.count(mine)) {
      wrong.push_back(f + ": folder " + mine + " is not in the folder order");
      continue;
    }
    const auto lines = lines_of(f);
    for (size_t i = 0; i < lines.size(); ++i) {
      std::smatch m;
      if (!std::regex_search(lines[i], m, include)) continue;
      const std::string to = m[2] == "dtrain" ? folder_of_public(publics, m[1]) : m[2].str();
      if (to == mine) continue;
      if (!rank.count(to) || rank[to] < rank[mine])
        wrong.push_back(f + ":" + std::to_string(i + 1) + ": " + mine + " includes " + m[1].str() +
                        " (" + (to.empty() ? std::string("a public header of no folder") : to) +
                        ", above it)");
    }
  }
  EXPECT_GE(rank.size(), 14u) << line;
  EXPECT_TRUE(wrong.empty()) << "includes that point up the folder order:" << joined(wrong);
}

TEST(Docs, EveryRepositoryPathInTheDocsExists) {
  // Words in `code spans` of README.md and docs/*.md that start with a folder of the repository.
  std::vector<std::string> docs = files_under("docs", {".md"});
  docs.push_back("README.md");
  const std::regex span("`([^`]+)`");
  const std::regex path(
      R"(^(src|include|tests|launch|configs|bench|docs|examples|cmake|python|\.ci)/[A-Za-z0-9_./+-]*$)");
  std::vector<std::string> missing;
  size_t checked = 0;
  for (const auto& d : docs) {
    const auto lines = lines_of(d);
    for (size_t i = 0; i < lines.size(); ++i) {
      for (std::sregex_iterator it(lines[i].begin(), lines[i].end(), span), end; it != end; ++it) {
        std::istringstream words((*it)[1].str());
        std::string w;
        while (words >> w) {
          while (!w.empty() && std::string(",;:)").find(w.back()) != std::string::npos)
            w.pop_back();
          if (!std::regex_match(w, path)) continue;
          ++checked;
          struct stat st {};
          if (stat((kRoot + "/" + w).c_str(), &st) != 0)
            missing.push_back(d + ":" + std::to_string(i + 1) + ": " + w);
        }
      }
    }
  }
  EXPECT_GT(checked, 50u);
  EXPECT_TRUE(missing.empty()) << "paths named in the docs that do not exist:" << joined(missing);
}

// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
std::string anchor_of(const std::string& heading) {
  std::string a;
  for (unsigned char c : heading) {
    if (std::isalnum(c))
      a += static_cast<char>(std::tolower(c));
    else if (c == ' ' || c == '-')
      a += '-';
    else if (c == '_')
      a += '_';
  }
  return a;
}

std::set<std::string> anchors_of(const std::string& rel) {
  std::set<std::string> out;
  const std::regex heading(R"(^#+\s+(.*\S)\s*$)");
  bool fenced = false;
  for (const auto& line : lines_of(rel)) {
    if (starts_with(line, "```")) fenced = !fenced;
    std::smatch m;
    if (!fenced && std::regex_match(line, m, heading)) out.insert(anchor_of(m[1]));
  }
  return out;
}

TEST(Docs, EveryRelativeLinkLeadsToAFileAndHeadingThatExist) {
  std::vector<std::string> docs = files_under("docs", {".md"});
  docs.push_back("README.md");
  const std::regex link(R"(\]\(([^)\s]+)\))");
  const std::regex span("`[^`]*`");
  std::vector<std::string> wrong;
  std::set<std::string> from_readme;
  size_t checked = 0;
  for (const auto& d : docs) {
    const std::string dir = d.find('/') == std::string::npos ? "" : d.substr(0, d.rfind('/') + 1);
    const auto lines = lines_of(d);
    bool fenced = false;
    for (size_t i = 0; i < lines.size(); ++i) {
      if (starts_with(lines[i], "```")) fenced = !fenced;
      if (fenced) continue;
      const std::string text = std::regex_replace(lines[i], span, "");
      for (std::sregex_iterator it(text.begin(), text.end(), link), end; it != end; ++it) {
        const std::string target = (*it)[1];
        if (target.find("://") != std::string::npos || starts_with(target, "mailto:")) continue;
        ++checked;
        const size_t hash = target.find('#');
        const std::string file = hash == 0 ? d : dir + target.substr(0, hash);
        const std::string where = d + ":" + std::to_string(i + 1) + ": " + target;
        struct stat st {};
        if (stat((kRoot + "/" + file).c_str(), &st) != 0) {
          wrong.push_back(where + " (no such file)");
          continue;
        }
        if (d == "README.md") from_readme.insert(file);
        if (hash != std::string::npos && !anchors_of(file).count(target.substr(hash + 1)))
          wrong.push_back(where + " (no such heading in " + file + ")");
      }
    }
  }
  for (const auto& page : files_under("docs", {".md"}))
    if (page.find('/', 5) == std::string::npos && !from_readme.count(page))
      wrong.push_back(page + " is not linked from README.md");
  EXPECT_GT(checked, 20u);
  EXPECT_TRUE(wrong.empty()) << "links in the docs that lead nowhere:" << joined(wrong);
}

}  // namespace
