// What the kernel benches (sgemm_bench, train_ops_bench) parse and set up alike: a count flag's value, and the
// global pool's threads.
#pragma once

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "ascent/base/thread_pool.h"

// v as the count of `flag` (0 to 4096, 0 only where allow_zero) into out; otherwise prints "PROG: FLAG V is not a
// valid count" and returns false.
inline bool parse_count(const char* prog, const std::string& flag, const char* v, bool allow_zero, int& out) {
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || n < 0 || n > 4096 || (!allow_zero && n == 0)) {
    std::fprintf(stderr, "%s: %s %s is not a valid count\n", prog, flag.c_str(), v);
    return false;
  }
  out = static_cast<int>(n);
  return true;
}

// Sizes the global thread pool: `threads`, or every core when 0. Returns the count used.
inline int start_threads(int threads) {
  if (threads == 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ascent::ThreadPool::set_global_threads(threads);
  return threads;
}
