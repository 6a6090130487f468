#pragma once
// The probes of one launch layout kept across launches, and the figures they
// settle on. One probe measures the links under whatever the host was doing
// and wherever the scheduler put the ranks in that second: with 4 ranks on 2
// cores one probe here measured staged copies 2-3x faster and reads 2-5x
// slower than the four taken in the next minute, and the layer then staged
// every all-to-all of every later launch until someone probed again. So the
// first kSettlingProbes launches of a layout each probe, and every figure is
// the median over the probes kept: one outlier among three is outvoted.
#include <filesystem>
#include <string>
#include <vector>

#include "comm/cluster_file.h"

namespace strata::comm {

constexpr size_t kSettlingProbes = 3;

// Where the raw probes behind the cache `cache` live (`<cache stem>.probe<i>.toml`, oldest first).
std::filesystem::path raw_probe_path(const std::filesystem::path& cache, size_t index);

// The raw probes of layout `key` kept beside `cache`, oldest first; an unreadable file, or another layout's, ends
// the list (its slot is written again).
std::vector<ClusterDescription> kept_probes(const std::filesystem::path& cache, const std::string& key);

// Keeps `probes` (oldest first, at most kSettlingProbes) beside `cache`, each written atomically.
void keep_probes(const std::filesystem::path& cache, const std::vector<ClusterDescription>& probes);

// The figures `probes` (oldest first, at least one) settle on: each measured figure the median over them (the mean
// of the middle two for an even count), a curve (rates, message times) point by point where every probe measured the
// same sizes (else the newest's curve); what is not measured (counts, the cache size, flags, the key) is the newest's. No
// calibration: one is fitted to figures, and the caller decides whether it still holds.
ClusterDescription settled_figures(const std::vector<ClusterDescription>& probes);

}  // namespace strata::comm
