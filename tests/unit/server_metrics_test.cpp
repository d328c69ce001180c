// Prometheus text rendering of the server's MetricsRegistry, and the SSE event format.
#include <gtest/gtest.h>

#include "server/metrics.h"
#include "server/sse.h"

namespace tide::server {
namespace {

TEST(ServerMetrics, RendersCountersGaugesAndHistograms) {
  MetricsRegistry m;
  m.add_counter("c_total", "A counter.");
  m.add_gauge("g", "A gauge.");
  m.add_histogram("h_seconds", "A histogram.", {0.1, 1});
  m.increment("c_total", 2, {{"status", "200"}});
  m.increment("c_total", 1, {{"status", "200"}});
  m.set("g", 0.25, {{"pool", "a\"b"}});
  m.observe("h_seconds", 0.05);
  m.observe("h_seconds", 0.5);
  m.observe("h_seconds", 5);
  EXPECT_EQ(m.value("c_total", {{"status", "200"}}), 3);
  EXPECT_EQ(m.render(),
            "# HELP c_total A counter.\n"
            "# TYPE c_total counter\n"
            "c_total{status=\"200\"} 3\n"
            "# HELP g A gauge.\n"
            "# TYPE g gauge\n"
            "g{pool=\"a\\\"b\"} 0.25\n"
            "# HELP h_seconds A histogram.\n"
            "# TYPE h_seconds histogram\n"
            "h_seconds_bucket{le=\"0.1\"} 1\n"
            "h_seconds_bucket{le=\"1\"} 2\n"
            "h_seconds_bucket{le=\"+Inf\"} 3\n"
            "h_seconds_sum 5.55\n"
            "h_seconds_count 3\n");
}

TEST(ServerMetrics, EmptyFamiliesShowZero) {
  MetricsRegistry m;
  m.add_counter("c_total", "A counter.");
  m.add_histogram("h", "H.", {1});
  EXPECT_EQ(m.render(),
            "# HELP c_total A counter.\n# TYPE c_total counter\nc_total 0\n"
            "# HELP h H.\n# TYPE h histogram\nh_bucket{le=\"1\"} 0\nh_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n");
}

TEST(ServerMetrics, RefusesMisuse) {
  MetricsRegistry m;
  m.add_counter("c_total", "A counter.");
  EXPECT_ANY_THROW(m.add_gauge("c_total", "again"));
  EXPECT_ANY_THROW(m.increment("c_total", -1));
  EXPECT_ANY_THROW(m.observe("c_total", 1));
  EXPECT_ANY_THROW(m.increment("unknown"));
}

TEST(ServerMetrics, FormatsValues) {
  EXPECT_EQ(format_metric_value(3), "3");
  EXPECT_EQ(format_metric_value(0.005), "0.005");
  EXPECT_EQ(format_metric_value(1.0 / 0.0), "+Inf");
  EXPECT_EQ(escape_label_value("a\\b\nc"), "a\\\\b\\nc");
}

TEST(ServerSse, FormatsEventsAndStopsAfterAFailedWrite) {
  EXPECT_EQ(sse_json_event(nlohmann::json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  std::string sent;
  int calls = 0;
  SseWriter writer([&](std::string_view bytes) {
    ++calls;
    if (calls == 2) return false;
    sent += bytes;
    return true;
  });
  EXPECT_TRUE(writer.send({{"x", "y"}}));
  EXPECT_FALSE(writer.send({{"x", "z"}}));
  EXPECT_TRUE(writer.failed());
  EXPECT_FALSE(writer.send_done());
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(sent, "data: {\"x\":\"y\"}\n\n");
}

}  // namespace
}  // namespace tide::server
