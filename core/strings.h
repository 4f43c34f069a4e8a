// String helpers for parsers: strict number parsing (the whole text must be a number),
// splitting, trimming, and edit distance for "did you mean" suggestions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace asgd {

std::string_view Trim(std::string_view s);
// Splits on sep; keeps empty fields ("a,,b" gives 3 fields). Fields are not trimmed.
std::vector<std::string> Split(std::string_view s, char sep);
std::string Join(const std::vector<std::string>& parts, std::string_view sep);
bool StartsWith(std::string_view s, std::string_view prefix);
bool EndsWith(std::string_view s, std::string_view suffix);
std::string ToLower(std::string_view s);

// Each returns nullopt unless the whole trimmed text parses and fits the type.
std::optional<int64_t> ParseInt64(std::string_view s);
std::optional<uint64_t> ParseUint64(std::string_view s);
std::optional<double> ParseDouble(std::string_view s);  // finite values only
// true/false, yes/no, on/off, 1/0 (case-insensitive).
std::optional<bool> ParseBool(std::string_view s);

// Levenshtein distance.
std::size_t EditDistance(std::string_view a, std::string_view b);
// The candidate closest to word if it is close enough to be a likely typo, else "".
std::string ClosestMatch(std::string_view word, const std::vector<std::string>& candidates);

// Human-readable byte count: "64 B", "4 KiB", "1.5 MiB".
std::string FormatBytes(double bytes);

}  // namespace asgd
