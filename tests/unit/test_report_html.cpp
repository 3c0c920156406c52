// src/telemetry/report_html.h: the series stay bounded (every stride-th record past the cap,
// the last one kept), the page embeds its data as one JSON object that reads back unchanged
// (also when a string holds "</script>"), and the page needs nothing from the network.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "telemetry/report_html.h"

namespace {

using dtrain::detail::EvalPoint;
using dtrain::detail::Facts;
using dtrain::detail::Finding;
using dtrain::detail::ReportPoint;
using dtrain::detail::ReportSeries;

ReportPoint point(int64_t step) {
  ReportPoint p;
  p.step = step, p.epoch = 1 + step / 100, p.time = 0.01 * static_cast<double>(step);
  p.loss = 1.0 / static_cast<double>(step + 1), p.samples_per_s = 1000 + static_cast<double>(step);
  p.phases.data = 0.001, p.phases.compute = 0.01, p.phases.comm = 0.002, p.phases.optimizer = 0.003;
  if (step % 2 == 0) p.gpu_util = 50 + static_cast<double>(step % 7);
  return p;
}

// The JSON between <script type="application/json" id="data"> and its </script>.
std::string data_block(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"data\">";
  const size_t a = html.find(open);
  if (a == std::string::npos) return "";
  const size_t b = html.find("</script>", a);
  return html.substr(a + open.size(), b - a - open.size());
}

size_t count(const std::string& s, const std::string& part) {
  size_t n = 0;
  for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) ++n;
  return n;
}

TEST(ReportSeries, KeepsEveryRecordUnderTheCap) {
  ReportSeries s(8);
  for (int64_t k = 0; k < 8; ++k) s.add(point(k));
  const auto pts = s.points();
  ASSERT_EQ(pts.size(), 8u);
  for (int64_t k = 0; k < 8; ++k) EXPECT_EQ(pts[static_cast<size_t>(k)].step, k);
  EXPECT_EQ(s.stride(), 1);
}

TEST(ReportSeries, PastTheCapKeepsEveryStrideThAndTheLast) {
  constexpr size_t kCap = 8;
  for (int64_t n : {9, 16, 17, 20, 33, 100, 1000}) {
    ReportSeries s(kCap);
    for (int64_t k = 0; k < n; ++k) s.add(point(k));
    // The stride: the smallest power of two whose multiples below n fit the cap.
    int64_t stride = 1;
    while ((n + stride - 1) / stride > static_cast<int64_t>(kCap)) stride *= 2;
    EXPECT_EQ(s.stride(), stride) << n;
    EXPECT_EQ(s.records(), n);
    std::vector<int64_t> expected;
    for (int64_t k = 0; k < n; k += stride) expected.push_back(k);
    if (expected.back() != n - 1) expected.push_back(n - 1);
    std::vector<int64_t> got;
    for (const auto& p : s.points()) got.push_back(p.step);
    EXPECT_EQ(got, expected) << n;
    EXPECT_LE(got.size(), kCap + 1);
  }
}

TEST(ReportHtml, DataReadsBackFromThePage) {
  ReportSeries s;
  for (int64_t k = 1; k <= 30; ++k) s.add(point(k));
  s.add_eval({15, 1, 0.5, 0.8});
  s.add_eval({30, 2, 0.25, std::nullopt});
  const Facts facts = {{"world", "2 rank(s) on a"}, {"model", "mlp, 1000 parameters"}};
  const std::vector<Finding> findings = {
      {"data-bound", "41% waiting", "raise data.workers from 2"}};
  const nlohmann::json data = dtrain::detail::report_data("dtrain report: x", facts, findings, s);
  const std::string html = dtrain::detail::report_html(data);
  const nlohmann::json back = nlohmann::json::parse(data_block(html));
  EXPECT_EQ(back, data);
  ASSERT_EQ(back["train"]["step"].size(), 30u);
  EXPECT_EQ(back["train"]["step"][0], 1);
  EXPECT_EQ(back["train"]["loss"][29].get<double>(), 1.0 / 31.0);
  EXPECT_EQ(back["train"]["samples_per_s"][4].get<double>(), 1005.0);
  EXPECT_TRUE(back["train"]["gpu_util"][0].is_null());  // step 1: no GPU figure
  EXPECT_EQ(back["train"]["gpu_util"][1].get<double>(), 50.0 + 2 % 7);
  EXPECT_EQ(back["train"]["phases"]["compute"][3].get<double>(), 0.01);
  EXPECT_EQ(back["eval"]["step"], nlohmann::json::array({15, 30}));
  EXPECT_EQ(back["eval"]["accuracy"][0].get<double>(), 0.8);
  EXPECT_TRUE(back["eval"]["accuracy"][1].is_null());
  EXPECT_EQ(back["findings"][0]["fix"], "raise data.workers from 2");
  EXPECT_EQ(back["facts"][1][1], "mlp, 1000 parameters");
  EXPECT_EQ(back["stride"], 1);
}

TEST(ReportHtml, StringsCannotEndTheDataBlock) {
  ReportSeries s;
  s.add(point(1));
  const std::string nasty = "a</script><script>alert(1)</script><!--";
  const nlohmann::json data =
      dtrain::detail::report_data(nasty, {{"run", nasty}}, {{"kind", nasty, nasty}}, s);
  const std::string html = dtrain::detail::report_html(data);
  EXPECT_EQ(count(html, "</script>"), 2u) << "the data block's end and the drawing script's end";
  EXPECT_EQ(nlohmann::json::parse(data_block(html)), data);
  // The title element holds the escaped text.
  EXPECT_NE(
      html.find("<title>a&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;&lt;!--</title>"),
      std::string::npos);
}

TEST(ReportHtml, SelfContained) {
  ReportSeries s;
  const std::string html = dtrain::detail::report_html(dtrain::detail::report_data("t", {}, {}, s));
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  for (const char* remote : {"https:", "src=", "<link", "@import", "url(", "fetch("})
    EXPECT_EQ(html.find(remote), std::string::npos) << remote;
  // The one URI is SVG's namespace, an identifier for createElementNS, not a fetch.
  EXPECT_EQ(count(html, "http"), 1u);
  EXPECT_NE(html.find("createElementNS(NS"), std::string::npos);
  EXPECT_NE(html.find("\"http://www.w3.org/2000/svg\""), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(data_block(html))["train"]["step"].size(), 0u);
}

}  // namespace
