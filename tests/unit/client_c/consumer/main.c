/* Uses the installed C API: prints the library's API version and fails if it is not the header's, and checks
 * that an error comes back as a result code with a message. */
#include <blockps/blockps.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  blockps_cluster* cluster = NULL;
  const blockps_result r = blockps_cluster_open("/nonexistent/cluster.toml", &cluster);
  printf("blockps API version %d (header %d); open of a missing file: %s: %s\n", blockps_api_version(),
         BLOCKPS_API_VERSION, blockps_result_name(r), blockps_last_error());
  if (blockps_api_version() != BLOCKPS_API_VERSION) return 1;
  return r == BLOCKPS_ERR_CONFIG && cluster == NULL && strstr(blockps_last_error(), "cannot read") != NULL ? 0 : 1;
}
