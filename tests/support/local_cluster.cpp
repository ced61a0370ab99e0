#include "tests/support/local_cluster.h"

#include <fstream>

#include "tests/support/blockps_shard.h"

namespace blockps::testing {

Status LocalCluster::start(const LocalClusterShape& shape, const std::string& name_prefix) {
  if (Status s = dir_.create(name_prefix); !s.ok()) return s;
  const auto layout = make_layout(shape.layout, shape.model_bytes, shape.block_bytes,
                                  static_cast<std::size_t>(shape.shards));
  std::string text = "[model]\nsize = " + std::to_string(shape.model_bytes) + "\ndtype = \"f32\"\nblock = " +
                     std::to_string(shape.block_bytes) + "\n[layout]\nkind = \"" +
                     std::string(to_string(shape.layout)) + "\"\n";
  for (int s = 0; s < shape.shards; ++s) {
    const std::string iqn = "iqn.2026-11.io.blockps:local-shard" + std::to_string(s);
    auto& tgtd = tgtds_.emplace_back(std::make_unique<TgtdInstance>());
    const std::string options = "size=" + std::to_string(layout->shard_bytes(static_cast<std::size_t>(s))) +
                                ";block=" + std::to_string(shape.block_bytes) + ";" + shape.shard_options;
    if (Status st = add_blockps_shard(*tgtd, 1, iqn, dir_.path("shard" + std::to_string(s) + ".ckpt"), options);
        !st.ok())
      return Status::Error("shard " + std::to_string(s) + ": " + st.message());
    text += "[[shard]]\nname = \"shard" + std::to_string(s) + "\"\n";
    text += "grad = \"" + tgtd->url(iqn, 1) + "\"\nweights = \"" + tgtd->url(iqn, 2) + "\"\nstatus = \"" +
            tgtd->url(iqn, 3) + "\"\n";
  }
  cluster_file_ = dir_.path("cluster.toml");
  std::ofstream file(cluster_file_);
  if (!(file << text) || !file.flush()) return Status::Error("cannot write " + cluster_file_);
  return Status::Ok();
}

std::string LocalCluster::logs() const {
  std::string out;
  for (std::size_t s = 0; s < tgtds_.size(); ++s)
    out += "---- shard " + std::to_string(s) + " tgtd log ----\n" + tgtds_[s]->log_text() + "\n";
  return out;
}

}  // namespace blockps::testing
