// `trident eval --hellaswag FILE`: multiple-choice accuracy (evaluation/multiple_choice.hpp) of a
// checkpoint, on every rank of one TP group (app/inference_model.hpp).
#include <fmt/format.h>
#include <mpi.h>
#include <nlohmann/json.hpp>

#include "app/commands.hpp"
#include "app/inference_model.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/output_file.hpp"
#include "evaluation/multiple_choice.hpp"

namespace trident {

int run_eval_hellaswag(const EvalArgs& args) {
  std::string checkpoint;
  const Config cfg = load_inference_deck(args, args.checkpoint, "evaluate", &checkpoint);
  text::TextCodec codec(cfg.data.tokenizer);
  if (cfg.data.tokenizer == Tokenizer::None)
    throw Error(fmt::format("{}: --hellaswag needs the run's tokenizer to read the examples' text; data.tokenizer is "
                            "\"none\"",
                            cfg.source));
  const std::vector<ChoiceExample> examples = read_hellaswag(args.hellaswag, codec);
  const int64_t endings = int64_t(examples.front().endings.size());
  log::info("trident eval {} (tp {}): {} on {} ({} examples of {} endings)", cfg.source, cfg.mesh.tp,
            checkpoint.empty() ? "model.init_from " + cfg.model.init_from : checkpoint, args.hellaswag,
            examples.size(), endings);
  InferenceModel held(cfg);
  GptModel& model = held.model();
  Decoder decoder(model.shapes(), model.layout(), held.parameters(), held.kernels(), held.tp(), endings, cfg.model.seq_len);
  const double start = MPI_Wtime();
  int64_t correct = 0, correct_by_sum = 0, truncated = 0;
  nlohmann::json per_example = nlohmann::json::array();
  for (size_t i = 0; i < examples.size(); ++i) {
    const ChoiceScore s = score_example(decoder, examples[i]);
    correct += s.prediction == examples[i].label;
    correct_by_sum += s.prediction_by_sum == examples[i].label;
    truncated += s.context_tokens_dropped > 0;
    per_example.push_back({{"line", examples[i].line},
                           {"label", examples[i].label},
                           {"prediction", s.prediction},
                           {"prediction_by_sum", s.prediction_by_sum},
                           {"mean_losses", s.mean_loss},
                           {"sum_losses", s.sum_loss},
                           {"context_tokens_dropped", s.context_tokens_dropped}});
    if ((i + 1) % 500 == 0 || i + 1 == examples.size())
      log::info("hellaswag: {}/{} examples, accuracy {:.4f} (mean ending loss), {:.4f} (total)", i + 1,
                examples.size(), double(correct) / double(i + 1), double(correct_by_sum) / double(i + 1));
  }
  const double seconds = MPI_Wtime() - start;
  const double n = double(examples.size());
  log::info("hellaswag: accuracy {:.4f} ({} of {}) by mean ending loss (llm.c's acc_norm), {:.4f} by total loss; "
            "{} context(s) shortened to fit seq_len {}; {:.1f} s",
            correct / n, correct, examples.size(), correct_by_sum / n, truncated, cfg.model.seq_len, seconds);
  if (!args.json.empty() && log::is_root()) {
    const nlohmann::json out = {{"examples", examples.size()},
                                {"accuracy", correct / n},
                                {"accuracy_by_sum", correct_by_sum / n},
                                {"correct", correct},
                                {"contexts_shortened", truncated},
                                {"file", args.hellaswag},
                                {"checkpoint", checkpoint},
                                {"seconds", seconds},
                                {"per_example", per_example}};
    write_file_atomically("eval results", args.json, out.dump(1) + "\n");
  }
  return 0;
}

}  // namespace trident
