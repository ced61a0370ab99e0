// `blockps exporter`: Prometheus metrics of every shard (client/cli/prometheus_metrics.h) over HTTP. Each scrape
// of /metrics reads every shard's status page afresh (client/cli/status_reports.h): the numbers are the shards'
// own, nothing is cached or accumulated here, so a restarted exporter loses nothing.
#include <httplib.h>

#include <chrono>
#include <iostream>
#include <mutex>

#include "client/cli/commands.h"
#include "client/cli/prometheus_metrics.h"
#include "client/cli/status_reports.h"

namespace blockps::cli {

int run_exporter(const std::string& cluster_file, const ExporterOptions& options) {
  auto loaded = load_cluster_file(cluster_file);
  if (!loaded.ok()) {
    print_error(loaded.message());
    return kExitFailed;
  }
  ClusterConfig config = std::move(loaded.value());
  // A scrape must answer within Prometheus's scrape_timeout (10 s by default): a shard that does not answer a
  // login within --timeout is reported down, and a lost session is not retried.
  config.client.timeout_s = options.timeout_s;
  config.client.reconnect_s = 0;

  const auto colon = options.listen.rfind(':');
  int port = -1;
  const std::string host = colon == std::string::npos ? "" : options.listen.substr(0, colon);
  try {
    if (colon != std::string::npos) port = std::stoi(options.listen.substr(colon + 1));
  } catch (const std::exception&) {
    port = -1;
  }
  if (host.empty() || port < 1 || port > 65535) {
    print_error("--listen " + options.listen + ": must be HOST:PORT with a port from 1 to 65535 (e.g. 127.0.0.1:9464)");
    return kExitUsage;
  }

  httplib::Server server;
  std::mutex scrape_mutex;  // one scrape at a time: each opens a session per LU of every shard
  server.Get("/metrics", [&](const httplib::Request&, httplib::Response& response) {
    std::lock_guard lock(scrape_mutex);
    const auto start = std::chrono::steady_clock::now();
    const StatusReports read = read_status_reports(config);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    response.set_content(render_prometheus(read.shards, seconds), "text/plain; version=0.0.4; charset=utf-8");
    for (const ShardReport& r : read.shards)
      if (!r.page) std::cerr << "blockps exporter: shard '" << r.name << "' is down: " << r.error << "\n";
  });
  server.Get("/", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("<html><body><a href=\"/metrics\">blockps metrics</a></body></html>\n", "text/html");
  });
  if (!server.bind_to_port(host, port)) {
    print_error("--listen " + options.listen +
                ": cannot listen there (address not on this host, or the port is taken)");
    return kExitFailed;
  }
  std::cerr << "blockps exporter: serving " << config.shards.size() << " shard(s) of " << cluster_file << " at http://"
            << options.listen << "/metrics\n";
  if (!server.listen_after_bind()) {
    print_error("the HTTP server at " + options.listen + " stopped");
    return kExitFailed;
  }
  return kExitOk;
}

}  // namespace blockps::cli
