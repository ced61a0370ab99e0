// A whole blockps cluster on this host for tests and benchmarks of the worker side: one private tgtd per shard
// (as on separate hosts) with grad/weights/status blockps LUs sized by the layout, and the cluster file that
// reaches them through libiscsi.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "blockps/layout.h"
#include "tests/support/temp_dir.h"
#include "tests/support/tgtd_instance.h"

namespace blockps::testing {

struct LocalClusterShape {
  std::uint64_t model_bytes = 0;
  std::uint64_t block_bytes = 256 * 1024;
  int shards = 2;
  LayoutKind layout = LayoutKind::stripe;
  std::string dtype = "f32";                        // the cluster file's [model] dtype (match shard_options')
  std::string shard_options = "dtype=f32;opt=sum";  // bsopts after role= and size= (block= is added)
  std::string client_options;                       // lines of the cluster file's [client] section
};

class LocalCluster {
 public:
  // Starts the shards' tgtds in a fresh scratch directory and writes the cluster file. The first failure,
  // with the tgtd log.
  Status start(const LocalClusterShape& shape, const std::string& name_prefix = "blockps-cluster-");
  const std::string& cluster_file() const { return cluster_file_; }
  TgtdInstance& tgtd(int shard) { return *tgtds_[static_cast<std::size_t>(shard)]; }
  // What a supervisor does after the shard's tgtd died: a fresh tgtd on the same portal with the same target and
  // LUs over the same checkpoint file (so the shard comes back from its last checkpoint).
  Status restart_shard(int shard);
  // The shard's target name and its LUs' URLs (lun 1 grad, 2 weights, 3 status).
  std::string target_iqn(int shard) const;
  std::string checkpoint_path(int shard) const;
  std::string url(int shard, int lun) const {
    return tgtds_[static_cast<std::size_t>(shard)]->url(target_iqn(shard), lun);
  }
  int shard_count() const { return static_cast<int>(tgtds_.size()); }
  // Every shard's tgtd log, for a failed test's output.
  std::string logs() const;

 private:
  TempDir dir_;
  std::vector<std::unique_ptr<TgtdInstance>> tgtds_;
  std::vector<std::string> shard_options_;  // each shard's bsopts after role=, as start() gave them
  std::string cluster_file_;
};

}  // namespace blockps::testing
