// page_touch_bench: what a fresh buffer's first touch costs on this machine, in 4 KB pages and
// in 2 MB transparent huge pages (common/allocators.h), both measured in this run.
// `page_touch_bench --help` lists the flags.
//
// Each round allocates N MB (2 MB-aligned; the huge-page one marked MADV_HUGEPAGE), writes
// one byte per 4 KB page, and frees it, so the next round gets memory back from the kernel
// again. The first round also pays for memory the process (or the machine) never touched;
// the later rounds show the steady cost. Reported per mode: the first round, the median of
// the others, and the median per 4 KB page; then the small-page / huge-page ratio.
#include <sys/mman.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <vector>

#include "bench/bench_cli.h"
#include "bench/bench_util.h"
#include "common/allocators.h"

namespace fullband {
namespace {

int Run(int argc, char** argv) {
  size_t mb = 64;
  int rounds = 9;
  bench::CommandLine cl(
      "page_touch_bench",
      "First touch of fresh memory in 4 KB and in 2 MB pages; prints JSON lines.");
  cl.AddInt("--mb", &mb, "MB allocated and touched each round (rounded down to a multiple of 2)",
            2);
  cl.AddInt("--rounds", &rounds, "rounds of each page size; the first is reported apart", 2);
  if (const std::optional<int> exit = cl.Parse(argc, argv)) return *exit;
  const size_t bytes = (mb << 20) / kHugePageBytes * kHugePageBytes;
  double later_small = 0;
  for (const bool huge : {false, true}) {
    std::vector<double> t;
    for (int r = 0; r < rounds; ++r) {
      char* p = static_cast<char*>(std::aligned_alloc(kHugePageBytes, bytes));
      if (p == nullptr) {
        std::fprintf(stderr, "page_touch_bench: cannot allocate %zu MB\n", mb);
        return 1;
      }
      if (huge) madvise(p, bytes, MADV_HUGEPAGE);
      t.push_back(bench::Seconds([&] {
        for (size_t i = 0; i < bytes; i += 4096) static_cast<volatile char*>(p)[i] = 1;
      }));
      std::free(p);
    }
    const double first = t.front();
    const double later = bench::Median(std::vector<double>(t.begin() + 1, t.end()));
    if (!huge) later_small = later;
    std::printf(
        "{\"bench\": \"page_touch\", \"pages\": \"%s\", \"mb\": %zu, \"rounds\": %d, "
        "\"first_ms\": %.2f, \"later_ms_median\": %.2f, \"us_per_4k_page\": %.3f}\n",
        huge ? "2M" : "4K", bytes >> 20, rounds, first * 1e3, later * 1e3,
        later * 1e6 / static_cast<double>(bytes / 4096));
    if (huge) {
      std::printf(
          "{\"bench\": \"page_touch\", \"summary\": true, \"small_over_huge\": %.1f, "
          "\"cpu\": \"%s\"}\n",
          later_small / later, bench::CpuModel().c_str());
    }
  }
  return 0;
}

}  // namespace
}  // namespace fullband

int main(int argc, char** argv) { return fullband::Run(argc, argv); }
