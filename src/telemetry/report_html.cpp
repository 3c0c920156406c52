#include "telemetry/report_html.h"

#include <algorithm>

namespace dtrain::detail {
namespace {

// The page around the data: the layout and its style. The script below draws into the boxes.
const char* const kHead = R"html(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>)html";

const char* const kStyle = R"html(</title>
<style>
body { font: 14px/1.45 -apple-system, "Segoe UI", "DejaVu Sans", Helvetica, Arial, sans-serif;
       margin: 0; padding: 20px 28px; background: #f4f5f7; color: #1f2328; }
h1 { font-size: 22px; margin: 0 0 14px; }
h2 { font-size: 15px; margin: 0 0 8px; color: #444c56; }
section { background: #fff; border: 1px solid #d8dde3; border-radius: 8px; padding: 12px 14px; }
.top { display: grid; grid-template-columns: 430px 1fr; gap: 16px; margin-bottom: 16px; }
.grid { display: grid; grid-template-columns: repeat(2, minmax(0, 1fr)); gap: 16px; }
table { border-collapse: collapse; width: 100%; }
td { padding: 2px 6px; vertical-align: top; border-bottom: 1px solid #eef0f3; }
td:first-child { color: #57606a; white-space: nowrap; }
ul { margin: 0; padding-left: 18px; }
li { margin-bottom: 8px; }
.kind { font-weight: 600; }
.fix { color: #0a6b2f; }
svg { width: 100%; height: auto; display: block; }
svg text { font-size: 11px; fill: #57606a; }
svg .empty { font-size: 13px; fill: #8c959f; }
svg .legend { font-size: 11px; fill: #1f2328; }
.axis { stroke: #8c959f; stroke-width: 1; }
.gridline { stroke: #eef0f3; stroke-width: 1; }
.note { color: #57606a; font-size: 12px; margin-top: 12px; }
</style>
</head>
<body>
<h1 id="title"></h1>
<div class="top">
<section><h2>Run</h2><table id="facts"></table></section>
<section><h2>Diagnosis</h2><ul id="findings"></ul></section>
</div>
<div class="grid">
<section><h2>Training loss (and test loss after each evaluation)</h2><div id="loss"></div></section>
<section><h2>Throughput (samples/s, all ranks)</h2><div id="rate"></div></section>
<section><h2>GPU utilization (%, NVML, rank 0)</h2><div id="gpu"></div></section>
<section><h2>Where the step time went (% per window, rank 0)</h2><div id="phases"></div></section>
</div>
<p class="note" id="note"></p>
<script type="application/json" id="data">)html";

const char* const kScript = R"html(</script>
<script>
(function () {
  "use strict";
  var D = JSON.parse(document.getElementById("data").textContent);
  var NS = "http://www.w3.org/2000/svg";
  var W = 560, H = 270, M = {l: 58, r: 16, t: 28, b: 36};
  function svgEl(tag, attrs, parent) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function label(parent, x, y, s, cls, anchor) {
    var t = svgEl("text", {x: x, y: y, "class": cls || "", "text-anchor": anchor || "start"}, parent);
    t.textContent = s;
    return t;
  }
  function num(v) { return typeof v === "number" && isFinite(v); }
  function ticks(lo, hi, n) {
    var rough = Math.max((hi - lo) / n, 1e-12);
    var base = Math.pow(10, Math.floor(Math.log(rough) / Math.LN10)), r = rough / base;
    var step = base * (r < 1.5 ? 1 : r < 3 ? 2 : r < 7 ? 5 : 10);
    var out = [];
    for (var v = Math.ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step)
      out.push(+v.toPrecision(12));
    return out;
  }
  function fmt(v) {
    var a = Math.abs(v);
    if (a >= 1e6) return +(v / 1e6).toFixed(2) + "M";
    if (a >= 1e4) return +(v / 1e3).toFixed(1) + "k";
    if (a >= 100 || a === 0) return "" + Math.round(v);
    return "" + +v.toPrecision(3);
  }
  // Axes for xs against every y in `ys`; returns the scales, or null (and says so) without data.
  function frame(id, xs, ys, opt) {
    var svg = svgEl("svg", {viewBox: "0 0 " + W + " " + H}, document.getElementById(id));
    var fin = ys.filter(num);
    if (!xs.length || !fin.length) {
      label(svg, W / 2, H / 2, opt.empty || "no data", "empty", "middle");
      return null;
    }
    var x0 = Math.min.apply(null, xs), x1 = Math.max.apply(null, xs);
    if (x0 > 0 && x0 <= 0.1 * x1) x0 = 0;  // a run from its start: the axis from step 0
    if (x1 === x0) { x0 -= 1; x1 += 1; }
    var y0 = "ymin" in opt ? opt.ymin : Math.min.apply(null, fin);
    var y1 = "ymax" in opt ? opt.ymax : Math.max.apply(null, fin);
    var pad = (y1 - y0) * 0.06 || Math.abs(y1) * 0.1 || 1;
    if (!("ymin" in opt)) y0 = y0 - pad < 0 && y0 >= 0 ? 0 : y0 - pad;
    if (!("ymax" in opt)) y1 += pad;
    var X = function (v) { return M.l + (v - x0) / (x1 - x0) * (W - M.l - M.r); };
    var Y = function (v) { return H - M.b - (v - y0) / (y1 - y0) * (H - M.t - M.b); };
    ticks(y0, y1, 5).forEach(function (v) {
      svgEl("line", {x1: M.l, x2: W - M.r, y1: Y(v), y2: Y(v), "class": "gridline"}, svg);
      label(svg, M.l - 6, Y(v) + 4, fmt(v), "", "end");
    });
    ticks(x0, x1, 6).forEach(function (v) {
      if (Math.abs(v - Math.round(v)) > 1e-9) return;  // steps are whole
      svgEl("line", {x1: X(v), x2: X(v), y1: H - M.b, y2: H - M.b + 4, "class": "axis"}, svg);
      label(svg, X(v), H - M.b + 16, fmt(v), "", "middle");
    });
    svgEl("line", {x1: M.l, x2: W - M.r, y1: H - M.b, y2: H - M.b, "class": "axis"}, svg);
    svgEl("line", {x1: M.l, x2: M.l, y1: M.t, y2: H - M.b, "class": "axis"}, svg);
    label(svg, (M.l + W - M.r) / 2, H - 4, "optimizer step", "", "middle");
    return {svg: svg, X: X, Y: Y};
  }
  function line(f, xs, ys, color) {
    var d = "", up = true;
    for (var i = 0; i < xs.length; ++i) {
      if (!num(ys[i])) { up = true; continue; }
      d += (up ? "M" : "L") + f.X(xs[i]).toFixed(1) + " " + f.Y(ys[i]).toFixed(1);
      up = false;
    }
    svgEl("path", {d: d, fill: "none", stroke: color, "stroke-width": 1.8, "stroke-linejoin": "round"}, f.svg);
    if (xs.length <= 60)
      for (var j = 0; j < xs.length; ++j)
        if (num(ys[j])) svgEl("circle", {cx: f.X(xs[j]), cy: f.Y(ys[j]), r: 2.2, fill: color}, f.svg);
  }
  function dots(f, xs, ys, color) {
    for (var i = 0; i < xs.length; ++i)
      if (num(ys[i]))
        svgEl("circle", {cx: f.X(xs[i]), cy: f.Y(ys[i]), r: 4.5, fill: color, stroke: "#fff", "stroke-width": 1.5}, f.svg);
  }
  // Above the plot, right-aligned: a swatch and a name per series.
  function legend(f, items) {
    var x = W - M.r, y = M.t - 10;
    for (var i = items.length - 1; i >= 0; --i) {
      var t = label(f.svg, x, y, items[i][0], "legend", "end");
      var w = (t.getComputedTextLength ? t.getComputedTextLength() : 0) || items[i][0].length * 7;
      svgEl("rect", {x: x - w - 14, y: y - 9, width: 10, height: 10, rx: 2, fill: items[i][1]}, f.svg);
      x -= w + 30;
    }
  }
  var T = D.train, E = D.eval;
  document.getElementById("title").textContent = D.title;
  D.facts.forEach(function (row) {
    var tr = document.createElement("tr");
    row.forEach(function (cell) {
      var td = document.createElement("td");
      td.textContent = cell;
      tr.appendChild(td);
    });
    document.getElementById("facts").appendChild(tr);
  });
  D.findings.forEach(function (f) {
    var li = document.createElement("li"), k = document.createElement("span");
    k.className = "kind";
    k.textContent = f.kind + ": ";
    li.appendChild(k);
    li.appendChild(document.createTextNode(f.what));
    if (f.fix) {
      var fix = document.createElement("div");
      fix.className = "fix";
      fix.textContent = "fix: " + f.fix;
      li.appendChild(fix);
    }
    document.getElementById("findings").appendChild(li);
  });

  var f = frame("loss", T.step.concat(E.step), T.loss.concat(E.loss), {});
  if (f) {
    line(f, T.step, T.loss, "#1f6feb");
    dots(f, E.step, E.loss, "#e16f24");
    legend(f, E.step.length ? [["train", "#1f6feb"], ["test", "#e16f24"]] : [["train", "#1f6feb"]]);
  }
  f = frame("rate", T.step, T.samples_per_s, {ymin: 0});
  if (f) line(f, T.step, T.samples_per_s, "#8250df");
  f = frame("gpu", T.step, T.gpu_util, {ymin: 0, ymax: 100, empty: "no GPU figures (a CPU run, or NVML not available)"});
  if (f) line(f, T.step, T.gpu_util, "#1a7f37");

  var names = ["data", "compute", "comm", "optimizer"];
  var colors = {data: "#e16f24", compute: "#1f6feb", comm: "#cf222e", optimizer: "#1a7f37"};
  var share = {}, n = T.step.length;
  names.forEach(function (k) { share[k] = []; });
  for (var i = 0; i < n; ++i) {
    var tot = 0;
    names.forEach(function (k) { tot += T.phases[k][i] || 0; });
    names.forEach(function (k) { share[k].push(tot > 0 ? 100 * (T.phases[k][i] || 0) / tot : 0); });
  }
  f = frame("phases", T.step, n ? [0, 100] : [], {ymin: 0, ymax: 100});
  if (f) {
    var low = T.step.map(function () { return 0; });
    names.forEach(function (k) {
      var high = low.map(function (v, i) { return v + share[k][i]; });
      if (n === 1) {
        var x = f.X(T.step[0]);
        svgEl("rect", {x: x - 14, width: 28, y: f.Y(high[0]), height: f.Y(low[0]) - f.Y(high[0]), fill: colors[k]}, f.svg);
      } else {
        var d = "";
        for (var i = 0; i < n; ++i) d += (i ? "L" : "M") + f.X(T.step[i]).toFixed(1) + " " + f.Y(high[i]).toFixed(1);
        for (var j = n - 1; j >= 0; --j) d += "L" + f.X(T.step[j]).toFixed(1) + " " + f.Y(low[j]).toFixed(1);
        svgEl("path", {d: d + "Z", fill: colors[k], "fill-opacity": 0.85, stroke: "none"}, f.svg);
      }
      low = high;
    });
    legend(f, names.map(function (k) { return [k, colors[k]]; }));
  }
  var note = "Points: the " + n + " training records that read the loss";
  if (D.stride > 1) note += " (every " + D.stride + "th of " + D.records + ", and the last)";
  note += ". Phases are rank 0's host-clock seconds between records: data = waiting for the loader " +
          "while the GPU had nothing left to do, compute = forward and backward, comm = gradient all-reduce not hidden behind backward, " +
          "optimizer = clip and step.";
  document.getElementById("note").textContent = note;
})();
</script>
</body>
</html>
)html";

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '&')
      out += "&amp;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

nlohmann::json optional_json(const std::optional<double>& v) {
  return v ? nlohmann::json(*v) : nlohmann::json(nullptr);
}

}  // namespace

ReportSeries::ReportSeries(size_t cap) : cap_(std::max<size_t>(2, cap)) {}

void ReportSeries::add(const ReportPoint& p) {
  const int64_t ordinal = records_++;
  if (ordinal % stride_ != 0) {
    last_ = p;
    return;
  }
  last_.reset();
  if (points_.size() == cap_) {
    // Keep every other point: those whose ordinal is a multiple of the doubled stride.
    std::vector<ReportPoint> kept;
    kept.reserve(cap_ / 2 + 1);
    for (size_t i = 0; i < points_.size(); i += 2) kept.push_back(points_[i]);
    points_ = std::move(kept);
    stride_ *= 2;
    if (ordinal % stride_ != 0) {
      last_ = p;
      return;
    }
  }
  points_.push_back(p);
}

void ReportSeries::add_eval(const EvalPoint& e) {
  // Evaluations run once per epoch: far fewer than training records; the same cap bounds them.
  if (evals_.size() < cap_) evals_.push_back(e);
}

std::vector<ReportPoint> ReportSeries::points() const {
  std::vector<ReportPoint> out = points_;
  if (last_) out.push_back(*last_);
  return out;
}

nlohmann::json report_data(const std::string& title, const Facts& facts,
                           const std::vector<Finding>& findings, const ReportSeries& series) {
  using nlohmann::json;
  json data;
  data["title"] = title;
  data["facts"] = json::array();
  for (const auto& [label, value] : facts) data["facts"].push_back(json::array({label, value}));
  data["findings"] = json::array();
  for (const Finding& f : findings)
    data["findings"].push_back({{"kind", f.kind}, {"what", f.what}, {"fix", f.fix}});
  json train = {{"step", json::array()},          {"epoch", json::array()},
                {"time", json::array()},          {"loss", json::array()},
                {"samples_per_s", json::array()}, {"gpu_util", json::array()}};
  json phases = {{"data", json::array()},
                 {"compute", json::array()},
                 {"comm", json::array()},
                 {"optimizer", json::array()}};
  for (const ReportPoint& p : series.points()) {
    train["step"].push_back(p.step);
    train["epoch"].push_back(p.epoch);
    train["time"].push_back(p.time);
    train["loss"].push_back(p.loss);
    train["samples_per_s"].push_back(p.samples_per_s);
    train["gpu_util"].push_back(optional_json(p.gpu_util));
    phases["data"].push_back(p.phases.data);
    phases["compute"].push_back(p.phases.compute);
    phases["comm"].push_back(p.phases.comm);
    phases["optimizer"].push_back(p.phases.optimizer);
  }
  train["phases"] = phases;
  data["train"] = train;
  json eval = {{"step", json::array()},
               {"epoch", json::array()},
               {"loss", json::array()},
               {"accuracy", json::array()}};
  for (const EvalPoint& e : series.evals()) {
    eval["step"].push_back(e.step);
    eval["epoch"].push_back(e.epoch);
    eval["loss"].push_back(e.loss);
    eval["accuracy"].push_back(optional_json(e.accuracy));
  }
  data["eval"] = eval;
  data["stride"] = series.stride();
  data["records"] = series.records();
  return data;
}

std::string report_html(const nlohmann::json& data) {
  // Inside <script>, "</script>" or "<!--" in a string would end or change the block: every '<'
  // is written as the JSON escape \u003c, which reads back as the same string.
  const std::string raw = data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::string json;
  json.reserve(raw.size());
  for (char c : raw) {
    if (c == '<')
      json += "\\u003c";
    else
      json += c;
  }
  const std::string title = data.contains("title") && data["title"].is_string()
                                ? data["title"].get<std::string>()
                                : std::string("dtrain report");
  return std::string(kHead) + html_escape(title) + kStyle + json + kScript;
}

}  // namespace dtrain::detail
