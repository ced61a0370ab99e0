"""What a shard runs, as its status page or a checkpoint's header says it (docs/OPTIONS.md, the bsopts keys): for the
torch paths' checks that the shards run what the script asks (blockps/torch/optimizer.py, host.py) and the
checkpoint export (blockps/torch/checkpoint.py). The keys and their values are the shard's to check."""
import json


def options_of(text):
    """A checkpoint header's options text ("k=v;k=v") as {key: value} (a running shard gives the same as an object:
    shard_options). The keys and their values are the shard's to check (docs/OPTIONS.md); this only splits them."""
    return dict(kv.split("=", 1) for kv in text.split(";") if "=" in kv)


def shard_options(cluster):
    """Each shard's settings as {key: value} (its status page's shard.settings: the shard's own reading of its
    bsopts, values as bsopts spell them), in cluster-file order."""
    return [(shard, json.loads(page)["shard"]["settings"]) for shard, page in cluster.status_pages()]
