#include "core/log.hpp"
#include "core/log_streams.hpp"

#include <fmt/format.h>
#include <spdlog/sinks/stdout_color_sinks.h>

namespace trident::log {
namespace {

bool g_is_root = true;

// Information to stdout, warnings and errors to stderr (each flushed per line, so a job log that
// takes both keeps their order).
class SplitSink : public spdlog::sinks::sink {
 public:
  void log(const spdlog::details::log_msg& msg) override {
    if (msg.level >= spdlog::level::warn)
      err_.log(msg);
    else
      out_.log(msg);
  }
  void flush() override {
    out_.flush();
    err_.flush();
  }
  void set_pattern(const std::string& pattern) override {
    out_.set_pattern(pattern);
    err_.set_pattern(pattern);
  }
  void set_formatter(std::unique_ptr<spdlog::formatter> formatter) override {
    out_.set_formatter(formatter->clone());
    err_.set_formatter(std::move(formatter));
  }

 private:
  spdlog::sinks::stdout_color_sink_mt out_;
  spdlog::sinks::stderr_color_sink_mt err_;
};

std::shared_ptr<spdlog::logger> g_stderr_only, g_split;

}  // namespace

void init(int world_rank, int world_size) {
  g_is_root = world_rank == 0;
  const std::string rank_tag =
      world_size > 1 ? fmt::format("[rank {}] ", world_rank) : std::string();
  if (!g_stderr_only) {
    g_stderr_only = std::make_shared<spdlog::logger>("trident", std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    g_split = std::make_shared<spdlog::logger>("trident", std::make_shared<SplitSink>());
    spdlog::set_default_logger(g_stderr_only);
  }
  spdlog::set_pattern(fmt::format("[%H:%M:%S.%e] [%^%l%$] {}%v", rank_tag));
  g_split->set_pattern(fmt::format("[%H:%M:%S.%e] [%^%l%$] {}%v", rank_tag));
}

void use_job_log_streams() {
  if (g_split) spdlog::set_default_logger(g_split);
}

bool is_root() { return g_is_root; }

}  // namespace trident::log
