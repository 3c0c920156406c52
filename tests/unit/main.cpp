// Test driver for the `unit` tier: GoogleTest's main, and --source=FILE, which runs only the tests
// defined in tests/unit/FILE. ctest runs one process per test file (Note [one process per test
// file] in tests/CMakeLists.txt); a FILE that defines no test is an error, so a misspelled or
// emptied file fails instead of passing with nothing run.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace {

// "Suite.Name:Suite.Other..." for every test whose source file ends in "/" + source.
std::string filter_of_source(const std::string& source) {
  const std::string tail = "/" + source;
  std::string filter;
  const ::testing::UnitTest& unit = *::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit.total_test_suite_count(); ++i) {
    const ::testing::TestSuite& suite = *unit.GetTestSuite(i);
    for (int j = 0; j < suite.total_test_count(); ++j) {
      const std::string file = suite.GetTestInfo(j)->file();
      if (file.size() < tail.size() ||
          file.compare(file.size() - tail.size(), tail.size(), tail) != 0)
        continue;
      if (!filter.empty()) filter += ':';
      filter += std::string(suite.name()) + "." + suite.GetTestInfo(j)->name();
    }
  }
  return filter;
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::string source;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--source=", 9) == 0) {
      source = argv[i] + 9;
    } else {
      std::fprintf(
          stderr,
          "dtrain_unit_tests: unknown argument '%s' (GoogleTest's --gtest_* or --source=FILE)\n",
          argv[i]);
      return 2;
    }
  }
  if (!source.empty()) {
    if (GTEST_FLAG_GET(filter) != "*") {
      std::fprintf(stderr, "dtrain_unit_tests: --source and --gtest_filter together: give one\n");
      return 2;
    }
    const std::string filter = filter_of_source(source);
    if (filter.empty()) {
      std::fprintf(stderr, "dtrain_unit_tests: no test is defined in %s\n", source.c_str());
      return 2;
    }
    GTEST_FLAG_SET(filter, filter);
  }
  return RUN_ALL_TESTS();
}
