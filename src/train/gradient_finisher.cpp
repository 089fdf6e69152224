#include "train/gradient_finisher.hpp"

#include <cmath>

namespace trident {

GradientFinisher::GradientFinisher(const GptShapes& shapes, Kernels& kernels, ParallelMesh* mesh,
                                   const std::vector<std::unique_ptr<GptModel>>& chunks,
                                   const std::vector<std::unique_ptr<AdamW>>& optimizers, GradientReducer* reducer)
    : shapes_(shapes), k_(kernels), mesh_(mesh), chunks_(chunks), optimizers_(optimizers), reducer_(reducer) {
  norm_sums_ = k_.alloc_double(2);
  clip_coef_ = k_.alloc(1);
}

GradientFinisher::~GradientFinisher() {
  k_.free(norm_sums_);
  k_.free(clip_coef_);
}

void GradientFinisher::finish(double grad_clip) {
  phases_.clear();
  if (reducer_) {
    reducer_->finish_backward();
    phases_.push_back("dp_buckets");
  }
  if (mesh_ && mesh_->tp().size() > 1 && chunks_.front()->needs_finish_gradients()) {
    for (size_t c = 0; c < chunks_.size(); ++c) {
      if (sharded_gradients())
        chunks_[c]->finish_gradients(range_gradients(c), optimizers_[c]->begin(), optimizers_[c]->end());
      else
        chunks_[c]->finish_gradients();
    }
    phases_.push_back("tp_replicated");
  }
  const bool split_tied = shapes_.tied && mesh_ && mesh_->pp().size() > 1;
  if (split_tied) {
    reduce_tied_embedding();
    phases_.push_back("tied_embedding");
  }
  if (reducer_ && split_tied) {
    reducer_->reduce_deferred();
    phases_.push_back("dp_deferred");
  }
  add_square_sums();
  norm_pending_ = !norm_needs_host();
  if (norm_pending_) {
    if (grad_clip > 0) k_.clip_coefficient(clip_coef_, norm_sums_, grad_clip);
  } else {
    norm_ = host_norm();
  }
  phases_.push_back("norm");
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const int64_t n = optimizers_[c]->end() - optimizers_[c]->begin();
    if (!norm_pending_)
      clip_gradients(k_, range_gradients(c), n, norm_, grad_clip);
    else if (grad_clip > 0)
      k_.scale_by(range_gradients(c), clip_coef_, n);
  }
  phases_.push_back("clip");
}

double GradientFinisher::take_norm() {
  if (norm_pending_) {
    double sums[2];
    k_.copy_to_host_double(sums, norm_sums_, 2);
    norm_ = std::sqrt(sums[0] + sums[1]);  // host_norm's sum without ranks to add
    norm_pending_ = false;
  }
  return norm_;
}

// Each rank's gradients are its model's (or its ZeRO range of them) only with TP, PP or ZeRO.
bool GradientFinisher::norm_needs_host() const {
  return (reducer_ && reducer_->zero() > 0) || (mesh_ && (mesh_->tp().size() > 1 || mesh_->pp().size() > 1));
}

void GradientFinisher::reduce_tied_embedding() {
  Group* group = mesh_->embedding();
  if (!group) return;  // a middle stage holds neither copy
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const auto& layout = chunks_[c]->layout();
    if (layout.wte() < 0) continue;
    // zero 2: the deferred buffer, which starts at the token embedding (the layout's first tensor).
    float* g = sharded_gradients() ? reducer_->deferred_gradients(int(c)) : chunks_[c]->grads() + layout.wte();
    group->all_reduce(g, layout.find(layout.wte_name()).numel);
  }
}

float* GradientFinisher::range_gradients(size_t c) {
  return reducer_ ? reducer_->range_gradients(int(c)) : chunks_[c]->grads() + optimizers_[c]->begin();
}

// The squared sums of the step's gradients into norm_sums_, in backend memory.
void GradientFinisher::add_square_sums() {
  k_.fill_double(norm_sums_, 0.0, 2);
  const bool duplicate_wte = shapes_.tied && mesh_ && mesh_->pp().size() > 1;
  for (size_t c = 0; c < chunks_.size(); ++c) {
    // The last stage's copy of a tied embedding is counted by the first stage.
    const bool skip = duplicate_wte && chunks_[c]->layout().has_head() && !chunks_[c]->layout().has_embedding();
    // Under ZeRO each DP rank counts its own range (with zero 2 it holds no other reduced gradient).
    chunks_[c]->add_gradient_square_sums(norm_sums_, skip, range_gradients(c), optimizers_[c]->begin(),
                                         optimizers_[c]->end());
  }
}

// The norm from norm_sums_, summed over the ranks that hold parts of the gradient (waits for them).
double GradientFinisher::host_norm() {
  double sums[2];  // sharded over TP, replicated over TP
  k_.copy_to_host_double(sums, norm_sums_, 2);
  if (reducer_ && reducer_->zero() > 0) mesh_->dp().all_reduce_host(sums, 2);
  double sharded = sums[0], replicated = sums[1];
  if (mesh_ && mesh_->tp().size() > 1) mesh_->tp().all_reduce_host(&sharded, 1);
  double total = sharded + replicated;
  if (mesh_ && mesh_->pp().size() > 1) mesh_->pp().all_reduce_host(&total, 1);
  return std::sqrt(total);
}

}  // namespace trident
