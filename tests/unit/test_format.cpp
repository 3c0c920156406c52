// The C++ sources follow the repository's .clang-format (Google's style, 100 columns): every
// .cpp, .h, .cu and .cuh file under src/, include/, tests/, bench/ and examples/ is as
// `clang-format` would write it. The style is the output of Debian 12's clang-format 14 (what
// launch/setup.sh test installs there); another major version formats some constructs otherwise,
// so under one the check says which and runs nothing. Fix a failure with
//   clang-format -i <the files it names>
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>
#include <set>
#include <string>

#include "test_paths.h"

namespace {

struct Shell {
  int status = -1;
  std::string output;  // stdout and stderr
};

Shell shell(const std::string& cmd) {
  Shell r;
  if (FILE* p = popen((cmd + " 2>&1").c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
    r.status = pclose(p);
  }
  return r;
}

TEST(Format, EverySourceIsAsClangFormatWritesIt) {
  const Shell version = shell("clang-format --version");
  ASSERT_EQ(version.status, 0) << "no clang-format: apt-get install clang-format (launch/setup.sh "
                                  "test installs it)\n"
                               << version.output;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(version.output, m, std::regex(R"(version (\d+)\.)")))
      << version.output;
  if (m[1] != "14") GTEST_SKIP() << "the format is clang-format 14's; this is " << version.output;
  const std::string root = dtrain::test::source_dir();
  const Shell files = shell("cd '" + root +
                            "' && find src include tests bench examples -type f \\( -name '*.cpp' "
                            "-o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \\) | wc -l");
  ASSERT_EQ(files.status, 0) << files.output;
  EXPECT_GT(std::stoi(files.output), 300) << "the sources were not found under " << root;
  const Shell check = shell("cd '" + root +
                            "' && find src include tests bench examples -type f \\( -name '*.cpp' "
                            "-o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \\) -print0 | sort -z "
                            "| xargs -0 clang-format --dry-run --Werror --style=file");
  std::set<std::string> unformatted;
  const std::regex where(R"((^|\n)([^\n:]+):\d+:\d+: error)");
  for (std::sregex_iterator i(check.output.begin(), check.output.end(), where), end; i != end; ++i)
    unformatted.insert((*i)[2]);
  std::string list;
  for (const auto& f : unformatted) list += "\n  " + f;
  EXPECT_EQ(check.status, 0) << "files not as clang-format writes them (clang-format -i them):"
                             << list << "\n"
                             << check.output.substr(0, 3000);
}

}  // namespace
