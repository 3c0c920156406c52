// The data formats as the config knows them (Note [data formats]): each format's name, what
// `--help` says of it, the data.* keys a run of it reads (the schema's .by_format() rows) and the
// defaults it gives keys a config leaves unset. How it reads its files, what preprocess.json
// records for it and how `dtrain predict` reads its inputs are registered under the same name in
// src/data/formats/ (data/formats/registry.h).
// Invariants (tests/unit/test_data_formats.cpp): each name is listed once; every key a format
// reads is a .by_format() row of the schema, and every such row is read by some format;
// src/data/formats/ registers exactly these names.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/config.h"

namespace dtrain::config {

struct FormatRules {
  const char* name = "";
  const char* description = "";    // for --help: "MNIST-style files"; "" = the name alone
  std::vector<std::string> reads;  // the data.* keys a run of this format reads
  // Keys it does not read for a reason of its own, said instead of "data.format is <name>".
  std::vector<std::pair<std::string, std::string>> not_read;
  // Once a config's file and overrides are read (Config::from_string): the format's defaults for
  // keys the config does not set (their origin is "default"). Empty: none.
  std::function<void(Config&)> on_read;
  // Config::resolve: keys derived from other keys where the config leaves them 0. Empty: none.
  std::function<void(Config&)> on_resolve;
};

// Every format, in --help's order.
const std::vector<FormatRules>& data_formats();
// The format named `name`, or nullptr.
const FormatRules* find_format(const std::string& name);
// The rules of `f`; a DataFormat of a name no format has (made in C++) is an Error naming
// data.format, the formats and the closest name.
const FormatRules& rules_of(DataFormat f);
// Whether format `f` lists `key` among the keys it reads.
bool format_reads(DataFormat f, const std::string& key);
// "" when a run with `c` reads `key` because its format does, else why not ("data.format is csv").
std::string unread_by_format(const Config& c, const std::string& key);
// The names joined by `sep`: "idx | synthetic | ...".
std::string format_names(const std::string& sep);
// data.format's help: each name with its description ("idx (MNIST-style files), synthetic, ...").
std::string format_help();

}  // namespace dtrain::config
