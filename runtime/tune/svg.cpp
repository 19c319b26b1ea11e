// The SVG report of a sweep: GFLOP/s heatmaps over (tm, tn) per tk.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "format.h"
#include "gmmgen/tune/report.h"

namespace gmmgen::tune {
namespace {

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// Viridis at t in [0, 1], from five of its stops.
std::string colour(double t) {
  static constexpr int kStops[5][3] = {
      {68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
  t = std::clamp(t, 0.0, 1.0) * 4;
  const int i = std::min(3, int(t));
  const double f = t - i;
  char buf[8];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x",
                int(std::lround(kStops[i][0] + f * (kStops[i + 1][0] - kStops[i][0]))),
                int(std::lround(kStops[i][1] + f * (kStops[i + 1][1] - kStops[i][1]))),
                int(std::lround(kStops[i][2] + f * (kStops[i + 1][2] - kStops[i][2]))));
  return buf;
}

}  // namespace

std::string svg_text(const std::vector<Sweep>& sweeps) {
  constexpr int kCellW = 64, kCellH = 26, kLeft = 78, kTop = 58, kBottom = 46, kGap = 26;
  constexpr int kBar = 110;  // the colour bar and its labels
  std::ostringstream body;
  int y = 10, width = 400;
  const std::string font = "font-family=\"sans-serif\"";
  for (const Sweep& sw : sweeps) {
    const Variant* best = sw.best();
    double lo = 0, hi = 0;
    bool any = false;
    for (const Variant& v : sw.cands.variants)
      if (v.state == Variant::State::kOk) {
        lo = any ? std::min(lo, v.gflops) : v.gflops;
        hi = any ? std::max(hi, v.gflops) : v.gflops;
        any = true;
      }
    for (Isa isa : sw.isas) {
      // The grid of this family: every tm, tk and tn among its candidates.
      std::set<int64_t> tms, tks, tns;
      for (const Variant& v : sw.cands.variants)
        if (v.spec.isa == isa)
          tms.insert(v.spec.tiling.tm), tks.insert(v.spec.tiling.tk), tns.insert(v.spec.tiling.tn);
      if (tks.empty()) continue;
      const int grid_w = int(tns.size()) * kCellW, grid_h = int(tms.size()) * kCellH;
      const int panel_w = kLeft + grid_w + kGap;
      // At least the length of the rotated tm label, and room for the colour bar's labels.
      const int rows_h = std::max(grid_h, 5 * kCellH);
      body << "<text x=\"10\" y=\"" << y + 16 << "\" " << font
           << " font-size=\"13\" font-weight=\"bold\">"
           << xml_escape(tuning::problem_text(sw.problem) + "  isa=" + std::string(to_string(isa)))
           << "</text>\n";
      body << "<text x=\"10\" y=\"" << y + 32 << "\" " << font << " font-size=\"11\">"
           << xml_escape("M=" + std::to_string(sw.work.m) + ", " + sw.work.shape + ", " +
                         fixed(sw.rows_per_group, 1) + " rows/group; GFLOP/s of each tiling")
           << "</text>\n";
      int x = 0;
      for (int64_t tk : tks) {
        const int gx = x + kLeft, gy = y + kTop;
        body << "<text x=\"" << gx + grid_w / 2 << "\" y=\"" << gy - 8 << "\" " << font
             << " font-size=\"12\" text-anchor=\"middle\">tk = " << tk << "</text>\n";
        int row = 0;
        for (int64_t tm : tms) {
          const int cy = gy + row * kCellH;
          body << "<text x=\"" << gx - 6 << "\" y=\"" << cy + kCellH / 2 + 4 << "\" " << font
               << " font-size=\"11\" text-anchor=\"end\">" << tm << "</text>\n";
          int col = 0;
          for (int64_t tn : tns) {
            const int cx = gx + col * kCellW;
            const Variant* v = nullptr;
            for (const Variant& c : sw.cands.variants)
              if (c.spec.isa == isa && c.spec.tiling == Tiling{tm, tk, tn}) v = &c;
            std::string fill = "#eeeeee", text, text_colour = "#000000";
            if (v && v->state == Variant::State::kOk) {
              const double t = hi > lo ? (v->gflops - lo) / (hi - lo) : 1.0;
              fill = colour(t);
              text = fixed(v->gflops, 0);
              if (t < 0.5) text_colour = "#ffffff";
            } else if (v && v->state != Variant::State::kNotRun) {
              fill = "#f4c7c3";
              text = v->state == Variant::State::kMismatch ? "wrong" : "\u00d7";
            }
            body << "<rect x=\"" << cx << "\" y=\"" << cy << "\" width=\"" << kCellW
                 << "\" height=\"" << kCellH << "\" fill=\"" << fill
                 << "\" stroke=\"#ffffff\" stroke-width=\"1\"/>\n";
            if (v && v->heuristic)
              body << "<rect class=\"heuristic\" x=\"" << cx + 2 << "\" y=\"" << cy + 2
                   << "\" width=\"" << kCellW - 4 << "\" height=\"" << kCellH - 4
                   << "\" fill=\"none\" stroke=\"#d62728\" stroke-width=\"2\" "
                      "stroke-dasharray=\"4 2\"/>\n";
            if (v && v == best) {
              body << "<rect class=\"winner\" x=\"" << cx + 1 << "\" y=\"" << cy + 1
                   << "\" width=\"" << kCellW - 2 << "\" height=\"" << kCellH - 2
                   << "\" fill=\"none\" stroke=\"#000000\" stroke-width=\"3\"/>\n";
              text = "\u2605 " + text;
            }
            if (!text.empty())
              body << "<text x=\"" << cx + kCellW / 2 << "\" y=\"" << cy + kCellH / 2 + 4 << "\" "
                   << font << " font-size=\"11\" text-anchor=\"middle\" fill=\"" << text_colour
                   << "\">" << xml_escape(text) << "</text>\n";
            ++col;
          }
          ++row;
        }
        int col = 0;
        for (int64_t tn : tns)
          body << "<text x=\"" << gx + col++ * kCellW + kCellW / 2 << "\" y=\"" << gy + grid_h + 14
               << "\" " << font << " font-size=\"11\" text-anchor=\"middle\">" << tn << "</text>\n";
        body << "<text x=\"" << gx + grid_w / 2 << "\" y=\"" << gy + grid_h + 32 << "\" " << font
             << " font-size=\"12\" text-anchor=\"middle\">tn (columns per tile)</text>\n";
        body << "<text x=\"" << x + 16 << "\" y=\"" << gy + rows_h / 2 << "\" " << font
             << " font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 " << x + 16 << " "
             << gy + rows_h / 2 << ")\">tm (rows per tile)</text>\n";
        x += panel_w;
      }
      // The colour scale of this problem.
      const int bx = x + 10, by = y + kTop, bh = rows_h;
      body << "<rect class=\"scale\" x=\"" << bx << "\" y=\"" << by << "\" width=\"16\" height=\""
           << bh << "\" fill=\"url(#gflops-scale)\" stroke=\"#888888\"/>\n";
      body << "<text x=\"" << bx + 22 << "\" y=\"" << by + 10 << "\" " << font
           << " font-size=\"11\">" << (any ? fixed(hi, 1) : "-") << "</text>\n";
      body << "<text x=\"" << bx + 22 << "\" y=\"" << by + bh << "\" " << font
           << " font-size=\"11\">" << (any ? fixed(lo, 1) : "-") << "</text>\n";
      body << "<text x=\"" << bx + 22 << "\" y=\"" << by + bh / 2 + 4 << "\" " << font
           << " font-size=\"11\">GFLOP/s</text>\n";
      width = std::max({width, x + kBar, int(tuning::problem_text(sw.problem).size()) * 8 + 140});
      y += kTop + rows_h + kBottom;
    }
  }
  const std::string legend =
      "\u2605 outlined: fastest;  red dashes: the heuristic's tiling;  \u00d7: failed;  blank: "
      "not run";
  body << "<text x=\"10\" y=\"" << y + 14 << "\" " << font << " font-size=\"11\">"
       << xml_escape(legend) << "</text>\n";
  const int height = y + 30;
  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
      << "\" viewBox=\"0 0 " << width << " " << height << "\">\n"
      << "<title>gmm-gen tune: GFLOP/s over (tm, tn) per tk</title>\n"
      << "<defs><linearGradient id=\"gflops-scale\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">\n";
  for (int i = 0; i <= 4; ++i)
    out << "<stop offset=\"" << i * 25 << "%\" stop-color=\"" << colour(i / 4.0) << "\"/>\n";
  out << "</linearGradient></defs>\n"
      << "<rect width=\"100%\" height=\"100%\" fill=\"#ffffff\"/>\n"
      << body.str() << "</svg>\n";
  return out.str();
}

}  // namespace gmmgen::tune
