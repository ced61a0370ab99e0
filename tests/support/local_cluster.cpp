#include "tests/support/local_cluster.h"

#include <fstream>

#include "tests/support/blockps_shard.h"

namespace blockps::testing {

Status LocalCluster::start(const LocalClusterShape& shape, const std::string& name_prefix) {
  if (Status s = dir_.create(name_prefix); !s.ok()) return s;
  const auto layout =
      make_layout(shape.layout, shape.model_bytes, shape.block_bytes, static_cast<std::size_t>(shape.shards));
  std::string text = "[model]\nsize = " + std::to_string(shape.model_bytes) + "\ndtype = \"" + shape.dtype +
                     "\"\nblock = " + std::to_string(shape.block_bytes) + "\n[layout]\nkind = \"" +
                     std::string(to_string(shape.layout)) + "\"\n[client]\n" + shape.client_options;
  for (int s = 0; s < shape.shards; ++s) {
    const std::string iqn = target_iqn(s);
    auto& tgtd = tgtds_.emplace_back(std::make_unique<TgtdInstance>());
    const std::string& options =
        shard_options_.emplace_back("size=" + std::to_string(layout->shard_bytes(static_cast<std::size_t>(s))) +
                                    ";block=" + std::to_string(shape.block_bytes) + ";" + shape.shard_options);
    if (Status st = add_blockps_shard(*tgtd, 1, iqn, checkpoint_path(s), options); !st.ok())
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

std::string LocalCluster::target_iqn(int shard) const {
  return "iqn.2026-11.io.blockps:local-shard" + std::to_string(shard);
}

std::string LocalCluster::checkpoint_path(int shard) const {
  return dir_.path("shard" + std::to_string(shard) + ".ckpt");
}

Status LocalCluster::restart_shard(int shard) {
  if (shard < 0 || shard >= shard_count()) return Status::Error("no shard " + std::to_string(shard));
  TgtdInstance& t = tgtd(shard);
  if (Status s = t.restart(); !s.ok()) return s;
  return add_blockps_shard(t, 1, target_iqn(shard), checkpoint_path(shard),
                           shard_options_[static_cast<std::size_t>(shard)]);
}

std::string LocalCluster::logs() const {
  std::string out;
  for (std::size_t s = 0; s < tgtds_.size(); ++s)
    out += "---- shard " + std::to_string(s) + " tgtd log ----\n" + tgtds_[s]->log_text() + "\n";
  return out;
}

}  // namespace blockps::testing
