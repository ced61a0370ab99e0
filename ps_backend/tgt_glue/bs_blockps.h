/* The glue's one entry for whoever loads it: tgtd's entry point (bs_blockps_module.c), or the glue's unit test,
 * which includes bs_blockps.c into a program of its own. */
#ifndef BLOCKPS_BS_BLOCKPS_H
#define BLOCKPS_BS_BLOCKPS_H

/* Make `--bstype blockps` known to tgt: the core's log goes to tgtd's, the opcode map is set and the backing-store
 * template registered. Once per process: registering twice corrupts tgt's template list. */
void blockps_register_backing_store(void);

#endif
