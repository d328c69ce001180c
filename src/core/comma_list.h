// Splitting a flag's comma-separated list ("5, 17,42") into its items, each without the spaces and tabs around
// it. Every item is kept, empty ones too ("" is one empty item, "1,,2" has an empty second), so that the caller
// can refuse them by name.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tide {

inline std::vector<std::string> split_comma_list(std::string_view text) {
  std::vector<std::string> items;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t comma = text.find(',', pos);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = text.substr(pos, comma - pos);
    const size_t first = item.find_first_not_of(" \t");
    item = first == std::string_view::npos ? std::string_view() : item.substr(first, item.find_last_not_of(" \t") - first + 1);
    items.emplace_back(item);
    pos = comma + 1;
  }
  return items;
}

}  // namespace tide
