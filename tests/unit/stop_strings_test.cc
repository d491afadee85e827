// StopMatcher (serve/stop_strings.h): hand-worked cases, then random texts and splits against a brute-force reading
// of the contract written here. After each piece, the text emitted so far ends where the rest could first still
// begin a stop string. Once a stop string occurs, it is the text before the earliest occurrence.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ascent/base/error.h"
#include "ascent/serve/stop_strings.h"

namespace ascent::serve {
namespace {

// Feeds the pieces; returns what was emitted (with flush() when no stop matched) and whether a stop matched.
std::pair<std::string, bool> run(const std::vector<std::string>& stops, const std::vector<std::string>& pieces) {
  StopMatcher m(stops);
  std::string out;
  for (const std::string& p : pieces) {
    const StopPush r = m.push(p);
    out += r.text;
    if (r.stopped) return {out, true};
  }
  return {out + m.flush(), false};
}

TEST(StopMatcher, MatchAcrossPieces) {
  EXPECT_EQ(run({"STOP"}, {"hello S", "TO", "P world"}), std::make_pair(std::string("hello "), true));
  EXPECT_EQ(run({"STOP"}, {"S", "T", "O", "P"}), std::make_pair(std::string(""), true));
  EXPECT_EQ(run({"\n\n"}, {"a\n", "\nb"}), std::make_pair(std::string("a"), true));
}

TEST(StopMatcher, HoldsBackOnlyWhatCouldStartAStop) {
  StopMatcher m({"STOP"});
  EXPECT_EQ(m.push("abc S").text, "abc ");  // "S" could begin STOP
  EXPECT_EQ(m.push("T").text, "");
  const StopPush r = m.push("x");  // "STx" cannot: all of it is released
  EXPECT_EQ(r.text, "STx");
  EXPECT_FALSE(r.stopped);
  EXPECT_EQ(m.push("ST").text, "");
  EXPECT_EQ(m.flush(), "ST");  // the end came first: the held text is the text's own
  EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, OverlappingPrefixes) {
  // "aab" in "aaab": after "aaa" only the last two could begin the stop, so one "a" goes out.
  StopMatcher m({"aab"});
  EXPECT_EQ(m.push("a").text, "");
  EXPECT_EQ(m.push("a").text, "");
  EXPECT_EQ(m.push("a").text, "a");
  const StopPush r = m.push("b");
  EXPECT_EQ(r.text, "");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(run({"aab"}, {"aaab"}), std::make_pair(std::string("a"), true));
  EXPECT_EQ(run({"abab"}, {"aba", "bab"}), std::make_pair(std::string(""), true));
  EXPECT_EQ(run({"abab"}, {"ab", "aab", "ab"}), std::make_pair(std::string("aba"), true));
}

TEST(StopMatcher, EarliestMatchWins) {
  EXPECT_EQ(run({"world", "lo"}, {"hello world"}), std::make_pair(std::string("hel"), true));
  EXPECT_EQ(run({"lo", "world"}, {"hello world"}), std::make_pair(std::string("hel"), true));
  // Both complete in one piece; the one that starts first wins, whatever its length or place in the list.
  EXPECT_EQ(run({"cd", "bcde"}, {"abcdef"}), std::make_pair(std::string("a"), true));
  // A stop string that completes ends the text at once, even while a longer one that began earlier is unfinished.
  EXPECT_EQ(run({"abcd", "bc"}, {"ab", "c", "d"}), std::make_pair(std::string("a"), true));
}

TEST(StopMatcher, NothingAfterAStop) {
  StopMatcher m({"x"});
  EXPECT_TRUE(m.push("1x2").stopped);
  const StopPush r = m.push("3");
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.text, "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, NoStopsPassesEverythingThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.push("abc").text, "abc");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, MultibyteStopsHoldWholeCharacters) {
  const std::string e = "\xc3\xa9";  // U+00E9, two bytes
  StopMatcher m({e + e});
  EXPECT_EQ(m.push("a" + e).text, "a");  // the held tail is a whole character
  EXPECT_EQ(m.push("b").text, e + "b");
  EXPECT_EQ(run({e + "!"}, {"x" + e, "!y"}), std::make_pair(std::string("x"), true));
}

TEST(StopMatcher, RefusesEmptyAndTooMany) {
  try {
    StopMatcher m({"a", ""});
    FAIL() << "an empty stop string was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stop: string 1 is empty"), std::string::npos) << e.what();
  }
  try {
    StopMatcher m({"a", "b", "c", "d", "e"});
    FAIL() << "five stop strings were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("stop: at most 4 strings, got 5"), std::string::npos) << e.what();
  }
}

// Random stop strings and texts over a small alphabet (so prefixes overlap often), split at random code points.
TEST(StopMatcher, AgreesWithBruteForceOnRandomSplits) {
  const std::vector<std::string> alphabet = {"a", "b", "\xc3\xa9"};
  uint64_t state = 7;
  auto next = [&](uint64_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % n;
  };
  auto word = [&](uint64_t max_len) {
    std::string w;
    for (uint64_t i = 0, n = 1 + next(max_len); i < n; ++i) w += alphabet[next(alphabet.size())];
    return w;
  };
  int stopped_runs = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<std::string> stops;
    for (uint64_t i = 0, n = next(5); i < n; ++i) stops.push_back(word(4));
    std::vector<std::string> pieces;
    for (uint64_t i = 0, n = 1 + next(8); i < n; ++i) pieces.push_back(next(6) == 0 ? "" : word(3));
    StopMatcher m(stops);
    std::string text, emitted;
    bool stopped = false;
    for (const std::string& p : pieces) {
      text += p;
      const StopPush r = m.push(p);
      emitted += r.text;
      size_t first = std::string::npos;
      for (const std::string& s : stops) first = std::min(first, text.find(s));
      ASSERT_EQ(r.stopped, first != std::string::npos) << trial;
      if (r.stopped) {
        ASSERT_EQ(emitted, text.substr(0, first)) << trial;
        stopped = true;
        break;
      }
      size_t safe = text.size();  // the first position from which the rest could still begin a stop string
      for (size_t i = 0; i < text.size() && safe == text.size(); ++i) {
        for (const std::string& s : stops) {
          if (s.size() > text.size() - i && s.compare(0, text.size() - i, text, i) == 0) safe = i;
        }
      }
      ASSERT_EQ(emitted, text.substr(0, safe)) << trial;
    }
    if (!stopped) {
      emitted += m.flush();
      ASSERT_EQ(emitted, text) << trial;
    }
    stopped_runs += stopped;
  }
  EXPECT_GT(stopped_runs, 500);  // both outcomes are exercised
  EXPECT_LT(stopped_runs, 2500);
}

}  // namespace
}  // namespace ascent::serve
