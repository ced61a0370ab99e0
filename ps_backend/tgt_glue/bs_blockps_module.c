/*
 * tgtd's entry point into the module: register_bs_module, which tgtd calls for every file of its backing-store
 * directory (bs.c). It registers the glue (bs_blockps.c) only in a tgtd of the version whose source the glue is
 * compiled against. Linked into the module only: the glue's unit test runs the glue in a program of its own, where
 * no tgtd's version applies.
 */
#include <sys/wait.h>
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

#include "ps_backend/tgt_glue/bs_blockps.h"

#ifndef BLOCKPS_TGT_VERSION
#error "BLOCKPS_TGT_VERSION: the version of the tgt source this glue is compiled against (ps_backend/CMakeLists.txt)"
#endif

extern char **environ;

/* The running tgtd's version, as `tgtd --version` of this very executable prints it, into `out` (NUL-terminated,
 * without the newline); 0, or -1 when it could not be learned. posix_spawn, not fork: tgtd may have threads. */
static int running_tgtd_version(char *out, size_t size)
{
	char *argv[] = {"tgtd", "--version", NULL};
	posix_spawn_file_actions_t actions;
	int fds[2], status = 0, rc;
	size_t got = 0;
	pid_t pid;

	if (size == 0 || pipe2(fds, O_CLOEXEC) != 0)
		return -1;
	posix_spawn_file_actions_init(&actions);
	posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
	posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
	rc = posix_spawn(&pid, "/proc/self/exe", &actions, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&actions);
	close(fds[1]);
	if (rc != 0) {
		close(fds[0]);
		return -1;
	}
	while (got + 1 < size) {
		ssize_t n = read(fds[0], out + got, size - 1 - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fds[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	out[got] = '\0';
	out[strcspn(out, "\r\n")] = '\0';
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 && out[0] != '\0' ? 0 : -1;
}

/* The glue reads and writes tgt's internal structs (scsi_cmd, scsi_lu, bs_thread_info) as the source of
 * BLOCKPS_TGT_VERSION lays them out: in a tgtd of another version that would corrupt memory, so the module
 * refuses to register there, in one line naming both versions (scripts/ps-up.sh shows it). */
static int built_for_this_tgtd(void)
{
	char running[128];

	if (running_tgtd_version(running, sizeof running) != 0) {
		eprintf("blockps: NOT LOADED: could not learn this tgtd's version (`%s --version` failed); the module "
			"is built for tgt %s and refuses to guess\n", "/proc/self/exe", BLOCKPS_TGT_VERSION);
		return 0;
	}
	if (strcmp(running, BLOCKPS_TGT_VERSION) != 0) {
		eprintf("blockps: NOT LOADED: this module is built for tgt %s (its source's structs), the running tgtd "
			"is %s: rebuild it against this tgt (scripts/setup.sh BUILD fetches the matching source; then "
			"cmake --build BUILD && cmake --install BUILD --component tgt_module)\n",
			BLOCKPS_TGT_VERSION, running);
		return 0;
	}
	return 1;
}

/* Not a constructor as well: registering twice corrupts tgt's template list. */
__attribute__((visibility("default"))) void register_bs_module(void);
void register_bs_module(void)
{
	if (!built_for_this_tgtd())
		return; /* --bstype blockps stays unknown to this tgtd: every LU of ours is refused */
	blockps_register_backing_store();
}
