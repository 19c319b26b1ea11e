// Number formatting shared by the tuner's reports (inside the tuning library only).
#pragma once

#include <cstdio>
#include <string>

namespace gmmgen::tune {

// v with `decimals` digits after the point ("%.*f").
inline std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace gmmgen::tune
