/* LD_PRELOAD fix for `tgtd --iser port=N` (tgt 1.0.85, usr/iscsi/iser.c iser_param_parser): tgt calls
 * strtol() and then treats any non-zero errno as "invalid port supplied" without clearing errno first. errno
 * is already ENOENT when tgtd's main() starts (the dynamic loader's library search and libnl's constructor
 * fail to open files), so every port= is refused and every tgtd listens for iSER on 3260: only one shard per
 * host could have iSER. A preloaded object's constructor runs after those of the libraries tgtd links and
 * before main(); clearing errno there makes the check see strtol's own result. scripts/ps-up.sh preloads it
 * into tgtd when a shard serves iSER (blockps-iser). Nothing else changes in tgtd. */
#include <errno.h>

__attribute__((constructor)) static void blockps_clear_stale_errno(void) { errno = 0; }
