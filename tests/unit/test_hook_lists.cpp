// The standard hooks (src/hooks/standard.cpp: the factories standard_hooks() calls, in order)
// are listed, in that order, wherever the code and the docs list them: ARCHITECTURE.md's hook
// list, src/hooks/standard.h's table and include/dtrain/trainer.h's constructor contract.
#include <gtest/gtest.h>

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include "test_paths.h"
#include "test_support.h"

namespace {

std::string read(const std::string& rel) {
  return dtrain::test::read_text(std::string(dtrain::test::source_dir()) + "/" + rel);
}

std::vector<std::string> standard_hooks() {
  std::vector<std::string> made;
  const std::string standard = read("src/hooks/standard.cpp");
  const std::regex make(R"(\bmake_([a-z_]+)\()");
  for (std::sregex_iterator it(standard.begin(), standard.end(), make), end; it != end; ++it)
    made.push_back((*it)[1]);
  return made;
}

// Each of `names` found in `list` after the one before it.
void expect_in_order(const std::vector<std::string>& names, const std::string& list,
                     const std::string& where) {
  size_t at = 0;
  for (const auto& name : names) {
    const size_t pos = list.find(name, at);
    EXPECT_NE(pos, std::string::npos)
        << where << " does not list the standard hook " << name << " (in order): " << list;
    if (pos != std::string::npos) at = pos + name.size();
  }
}

TEST(HookLists, EveryStandardHookIsListedInItsOrder) {
  const std::vector<std::string> made = standard_hooks();
  ASSERT_GE(made.size(), 11u);
  const std::string doc = read("docs/ARCHITECTURE.md");
  const size_t start = doc.find("the standard ones (`src/hooks/standard.h`");
  ASSERT_NE(start, std::string::npos) << "ARCHITECTURE.md's hook list was not found";
  std::vector<std::string> quoted;
  for (const auto& m : made) quoted.push_back("`" + m + "`");
  expect_in_order(quoted, doc.substr(start, doc.find("\n\n", start) - start), "ARCHITECTURE.md");
  // standard.h's table: "//   profiler window  ..." at the start of a line.
  const std::string header = read("src/hooks/standard.h");
  const std::string table = header.substr(0, header.find("#pragma once"));
  std::vector<std::string> rows;
  for (std::string m : made) {
    std::replace(m.begin(), m.end(), '_', ' ');
    rows.push_back("\n//   " + m + " ");
  }
  expect_in_order(rows, table, "src/hooks/standard.h");
}

TEST(HookLists, TheTrainersContractCountsEveryStandardHook) {
  // trainer.h names each hook in prose; the sentence lists as many items as there are hooks.
  const std::string trainer = read("include/dtrain/trainer.h");
  const size_t order = trainer.find("standard hooks are installed, in this order");
  ASSERT_NE(order, std::string::npos);
  const size_t start = trainer.find("):", order) + 2;  // the list, after "(hooks/standard.h):"
  std::string sentence = trainer.substr(start, trainer.find(". ", start) - start);
  sentence = std::regex_replace(sentence, std::regex(R"(\([^)]*\))"), "");  // asides
  sentence = std::regex_replace(sentence, std::regex(R"(\n\s*//)"), "");
  const size_t items = static_cast<size_t>(std::count(sentence.begin(), sentence.end(), ',')) + 2;
  EXPECT_EQ(items, standard_hooks().size()) << sentence;
}

}  // namespace
