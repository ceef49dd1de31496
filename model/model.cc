// The model and its K-pass step. The activation layout is in model/activations.h, the layer's
// attention and FFN halves as forward/backward pairs in model/layers.h; here are the input
// stage (pass 1 / feedback fusion), the parameter views, and Step(). The weights' files are
// model_io.cc's.
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <optional>

#include "model/activations.h"
#include "model/layers.h"
#include "ops/readout_loss.h"

namespace fullband::model {

using ops::Backend;
using ops::DType;
using ops::Shape;
using ops::Tensor;

void PlainMask(const int32_t* inputs, int64_t t, int64_t eod_id, bool mixin, Rng& rng,
               uint8_t* plain) {
  int64_t a = 0;
  while (a < t) {
    int64_t b = a + 1;  // segment [a, b): ends after the next EOD input token
    while (b < t && inputs[b - 1] != eod_id) ++b;
    const int64_t len = b - a;
    const int64_t p = mixin ? 1 + static_cast<int64_t>(rng.Below(static_cast<uint64_t>(len))) : 1;
    for (int64_t i = a; i < b; ++i) plain[i] = (i - a) < p ? 1 : 0;
    a = b;
  }
}

Rng StepDrawRng(uint64_t seed, int pass, int64_t row, int kind) {
  return Rng(seed ^ (static_cast<uint64_t>(pass) * 0x9E3779B97F4A7C15ull) ^
             (static_cast<uint64_t>(row) * 0xD1B54A32D192ED03ull) ^
             (static_cast<uint64_t>(kind) * 0xBF58476D1CE4E5B9ull));
}

namespace {

// h (rows of T·D) += ξ, ξ ~ U(-jitter, jitter): row r's drawn in order from its own generator
// (Note [Step draws]) on the host and uploaded into `staging` a bounded piece at a time (a
// whole (N, D) host buffer would add to the peak memory).
void AddJitter(Backend& be, Tensor h, Tensor staging, int64_t rows, double jitter,
               const StepOptions& options, int pass) {
  constexpr int64_t kPiece = 1 << 14;
  const int64_t row_len = h.numel() / rows;
  std::vector<float> host(std::min(kPiece, row_len));
  for (int64_t r = 0; r < rows; ++r) {
    Rng rng = StepDrawRng(options.seed, pass, options.row_offset + r, /*kind=*/0);
    for (int64_t start = 0; start < row_len; start += kPiece) {
      const int64_t len = std::min(kPiece, row_len - start);
      for (int64_t i = 0; i < len; ++i) {
        host[i] = static_cast<float>((2.0 * rng.Uniform() - 1.0) * jitter);
      }
      be.CopyFromHost(staging.f32() + r * row_len + start, host.data(), len * sizeof(float));
    }
  }
  be.ResidualForward(h, staging, 1.0f);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

struct Model::Impl {
  struct StepState;
  Status Upload(const int32_t* tokens, StepState& st, int64_t* counted);
  void InputStage(int k, const PassActs& p, Tensor x0);
  void FeedbackInput(int k, const StepState& st, PassActs& p, StepResult& result);
  void Forward(const StepState& st, StepResult& result);
  void CombineShards(const StepState& st, Tensor loss, Tensor lse, int64_t first_row);
  void LayersBackward(int k, const StepState& st, const PassActs& p, const std::vector<Tensor>& x);
  void InputBackward(int k, const StepState& st, const PassActs& p);
  void Backward(const StepState& st);

  const ModelConfig* config = nullptr;
  ModelConfig local;  // this tensor-parallel rank's share (LocalConfig)
  std::optional<TpGroup> tp;
  int64_t vocab_begin = 0;  // the first row of the embedding this rank holds
  Backend* be = nullptr;
  ModelShape shape;
  std::optional<ops::Arena> params, grads, acts;
  // Views of the global parameters (p_) and their gradients (g_).
  Tensor embed, final_norm, norm_g, w_g, w_u, norm_in;
  Tensor d_embed, d_final_norm, d_norm_g, d_w_g, d_w_u, d_norm_in;
  std::vector<LayerParams> layer_p, layer_g;
  // Ranges [begin, end) of the arenas, in floats: each layer's parameters, the final norm's.
  std::vector<std::pair<int64_t, int64_t>> layer_range;
  std::pair<int64_t, int64_t> final_norm_range;
  std::vector<PassActs> passes;
  LayerActs shared;  // recomputation scratch: selective, the FFN; full, one whole layer
  Scratch s;
};

// ---------------------------------------------------------------------------------------------

Model::Model(const ModelConfig& config, const ModelShape& shape, Backend* backend,
             comm::Communicator* tp)
    : config_(config),
      shape_(shape),
      backend_(backend),
      table_(ParameterTable::Build(config, tp == nullptr ? 1 : tp->size(),
                                   tp == nullptr ? 0 : tp->rank())),
      impl_(std::make_unique<Impl>()) {}

namespace {

// INVALID_ARGUMENT unless `tp` ranks can split `m` (docs/PARALLEL.md).
Status CheckTensorParallel(const ModelConfig& m, int tp) {
  FB_RETURN_IF_ERROR(CheckTensorParallelSplit(m, tp));
  if (m.ignore_id == ops::kOtherShard) {
    return InvalidArgumentError("model.ignore_id " + std::to_string(m.ignore_id) +
                                " is reserved for vocabulary shards");
  }
  return OkStatus();
}

}  // namespace

Model::~Model() = default;

StatusOr<std::unique_ptr<Model>> Model::Create(const ModelConfig& config, const ModelShape& shape,
                                               Backend* backend, comm::Communicator* tp,
                                               comm::Communicator* tp_device) {
  FB_RETURN_IF_ERROR(config.Validate());
  const int tp_size = tp == nullptr ? 1 : tp->size();
  FB_RETURN_IF_ERROR(CheckTensorParallel(config, tp_size));
  if (shape.max_batch < 1 || shape.max_seq < 1 || shape.max_passes < 1) {
    return InvalidArgumentError("model shape: batch " + std::to_string(shape.max_batch) + ", seq " +
                                std::to_string(shape.max_seq) + ", passes " +
                                std::to_string(shape.max_passes) + " must all be >= 1");
  }
  if (shape.max_seq > config.max_seq_len) {
    return InvalidArgumentError("sequence length " + std::to_string(shape.max_seq) +
                                " exceeds model.max_seq_len " + std::to_string(config.max_seq_len));
  }
  std::unique_ptr<Model> model(new Model(config, shape, backend, tp));
  Impl& im = *model->impl_;
  im.config = &model->config_;
  im.local = LocalConfig(config, tp_size);
  im.tp.emplace(tp_device == nullptr ? tp : tp_device, tp);
  im.vocab_begin = im.local.vocab_size * (tp == nullptr ? 0 : tp->rank());
  im.be = backend;
  im.shape = shape;
  if (shape.param_multiple < 1) {
    return InvalidArgumentError("model shape: param_multiple " +
                                std::to_string(shape.param_multiple) + " must be >= 1");
  }
  // The arenas hold whole multiples of param_multiple floats; the tail past the table is zero.
  const int64_t total = (model->table_.total_numel() + shape.param_multiple - 1) /
                        shape.param_multiple * shape.param_multiple;
  const size_t param_bytes = static_cast<size_t>(total) * sizeof(float);
  FB_ASSIGN_OR_RETURN(ops::Arena params, ops::Arena::Create(backend, param_bytes));
  FB_ASSIGN_OR_RETURN(ops::Arena grads, ops::Arena::Create(backend, param_bytes));
  Carver measure(nullptr, backend->device());
  CarveActivations(measure, im.local, shape, im.s, im.shared, im.passes);
  FB_ASSIGN_OR_RETURN(ops::Arena acts, ops::Arena::Create(backend, measure.bytes()));
  im.params.emplace(std::move(params));
  im.grads.emplace(std::move(grads));
  im.acts.emplace(std::move(acts));
  const Tensor block = im.acts->Take(DType::kU8, {static_cast<int64_t>(measure.bytes())});
  Carver carve(static_cast<char*>(block.data), backend->device());
  CarveActivations(carve, im.local, shape, im.s, im.shared, im.passes);
  FB_CHECK_EQ(carve.bytes(), measure.bytes());

  model->params_all_ = im.params->TakeF32({total});
  model->grads_all_ = im.grads->TakeF32({total});
  const ParameterTable& table = model->table_;
  const auto view = [&](ParamRole role, bool grad) {
    const ParamSpec& spec = table.Get(role);
    return grad ? model->Grad(spec) : model->Param(spec);
  };
  im.embed = view(ParamRole::kEmbed, false);
  im.final_norm = view(ParamRole::kFinalNorm, false);
  im.norm_g = view(ParamRole::kFeedbackNormG, false);
  im.w_g = view(ParamRole::kFeedbackWg, false);
  im.w_u = view(ParamRole::kFeedbackWu, false);
  im.norm_in = view(ParamRole::kFeedbackNormIn, false);
  im.d_embed = view(ParamRole::kEmbed, true);
  im.d_final_norm = view(ParamRole::kFinalNorm, true);
  im.d_norm_g = view(ParamRole::kFeedbackNormG, true);
  im.d_w_g = view(ParamRole::kFeedbackWg, true);
  im.d_w_u = view(ParamRole::kFeedbackWu, true);
  im.d_norm_in = view(ParamRole::kFeedbackNormIn, true);
  // The arena ranges whose gradients become final together (StepOptions::grads_final).
  const auto range = [](const ParamSpec& first, const ParamSpec& last) {
    return std::make_pair(first.offset, last.offset + last.numel);
  };
  const ParamSpec& final_norm = table.Get(ParamRole::kFinalNorm);
  im.final_norm_range = range(final_norm, final_norm);
  for (int64_t l = 0; l < config.n_layers; ++l) {
    im.layer_range.push_back(
        range(table.Get(ParamRole::kAttnNorm, l), table.Get(ParamRole::kW2, l)));
    im.layer_p.push_back(ViewLayer(table, model->params_all_.f32(), backend->device(), l));
    im.layer_g.push_back(ViewLayer(table, model->grads_all_.f32(), backend->device(), l));
  }
  backend->Zero(model->params_all_);
  backend->Zero(model->grads_all_);
  return model;
}

size_t Model::activation_bytes() const { return impl_->acts->capacity(); }

ops::Shape Model::readout_block() const { return impl_->s.logits.shape; }

Tensor Model::Param(const ParamSpec& spec) const {
  return ViewOf(spec, params_all_.f32(), backend_->device());
}

Tensor Model::Grad(const ParamSpec& spec) const {
  return ViewOf(spec, grads_all_.f32(), backend_->device());
}

void Model::ZeroGradients() { backend_->Zero(grads_all_); }

void Model::InitParameters(uint64_t seed) {
  // The whole tensor's values are drawn row by row, this rank's box kept, and uploaded through a
  // bounded host buffer: a whole (V, D) embedding on the host would add its size to the
  // process's peak memory on top of the arenas.
  constexpr int64_t kChunk = 1 << 16;
  std::vector<float> row, host;
  for (const ParamSpec& spec : table_.specs()) {
    Rng rng = Rng::ForStream(seed, spec.name);
    const MatrixBox b = AsMatrix(spec);
    float* dst = Param(spec).f32();
    row.resize(b.cols);
    host.clear();
    for (int64_t r = 0; r < b.row0 + b.box_rows; ++r) {
      for (float& x : row) {
        x = spec.kind == ParamKind::kNormGain ? 1.0f
                                              : static_cast<float>(rng.Normal() * spec.init_std);
      }
      if (r < b.row0) continue;
      host.insert(host.end(), row.begin() + b.col0, row.begin() + b.col0 + b.box_cols);
      if (static_cast<int64_t>(host.size()) >= kChunk || r + 1 == b.row0 + b.box_rows) {
        backend_->CopyFromHost(dst, host.data(), host.size() * sizeof(float));
        dst += host.size();
        host.clear();
      }
    }
  }
}

// ---- The step, stage by stage: check and upload the batch, forward through K passes (each
// with its fused readout loss), backward pass by pass, then the shared feedback gate and the
// embedding.

// What one step's stages share.
struct Model::Impl::StepState {
  const StepOptions& options;
  Dims d;
  int k_passes = 1;
  int64_t denominator = 0;               // targets every mean is over
  std::vector<int32_t> inputs, targets;  // (B, T) on the host
  // The same as ids of this rank's vocabulary shard (tensor parallelism; else the same ids).
  std::vector<int32_t> shard_inputs, shard_targets;
};

Status Model::Impl::Upload(const int32_t* tokens, StepState& st, int64_t* counted) {
  const ModelConfig& cfg = *config;
  const int64_t batch = st.d.b, seq = st.d.t, n = st.d.n;
  // Position t of a row is the input of step t (t < T) and the target of step t - 1 (t > 0).
  for (int64_t bi = 0; bi < batch; ++bi) {
    for (int64_t ti = 0; ti <= seq; ++ti) {
      const int32_t tok = tokens[bi * (seq + 1) + ti];
      const std::string where =
          " at batch row " + std::to_string(bi) + ", position " + std::to_string(ti);
      if (tok == cfg.ignore_id && ti < seq) {
        return InvalidArgumentError("token " + std::to_string(tok) + where +
                                    " is ignore_id, which an input (positions 0..T-1) may not be");
      }
      if (tok != cfg.ignore_id && (tok < 0 || tok >= cfg.vocab_size)) {
        return InvalidArgumentError("token " + std::to_string(tok) + where +
                                    " is outside the vocabulary [0, " +
                                    std::to_string(cfg.vocab_size) + ")");
      }
    }
  }
  st.inputs.resize(n);
  st.targets.resize(n);
  *counted = 0;
  for (int64_t bi = 0; bi < batch; ++bi) {
    for (int64_t ti = 0; ti < seq; ++ti) {
      st.inputs[bi * seq + ti] = tokens[bi * (seq + 1) + ti];
      st.targets[bi * seq + ti] = tokens[bi * (seq + 1) + ti + 1];
      *counted += st.targets[bi * seq + ti] != cfg.ignore_id;
    }
  }
  // Ids of this rank's vocabulary rows [v0, v1), the others' kOtherShard (ops/backend.h).
  const int64_t v0 = vocab_begin, v1 = vocab_begin + local.vocab_size;
  const auto shard = [&](int32_t id) {
    if (id == cfg.ignore_id) return id;
    return id >= v0 && id < v1 ? static_cast<int32_t>(id - v0) : ops::kOtherShard;
  };
  st.shard_inputs.resize(n);
  st.shard_targets.resize(n);
  std::transform(st.inputs.begin(), st.inputs.end(), st.shard_inputs.begin(), shard);
  std::transform(st.targets.begin(), st.targets.end(), st.shard_targets.begin(), shard);
  be->CopyFromHost(s.tokens.data, st.shard_inputs.data(), n * sizeof(int32_t));
  be->CopyFromHost(s.targets.data, st.shard_targets.data(), n * sizeof(int32_t));
  return OkStatus();
}

// The input stage. Pass 1: x0 = RMSNorm(e; norm_in) (or e). Pass k >= 2, from p.shifted:
// value = shift(ĥ) W_uᵀ, u = the feedback mix, and unless x0 is empty x0 = RMSNorm(u; norm_in).
void Model::Impl::InputStage(int k, const PassActs& p, Tensor x0) {
  if (k == 1) {
    if (config->pass1_input_norm) {
      be->RmsNormForward(x0, p.rstd_in, s.e, norm_in, kEps);
    } else {
      CopyTensor(*be, x0, s.e);
    }
    return;
  }
  Linear(*be, p.value, p.shifted, w_u);
  be->FeedbackMixForward(p.u, p.value, s.gate_fb, s.e, p.plain);
  if (!x0.empty()) be->RmsNormForward(x0, p.rstd_in, p.u, norm_in, kEps);
}

// ĥ = h[k-1] + ξ shifted into p.shifted, and the pass's plain mask (Note [Step draws]).
void Model::Impl::FeedbackInput(int k, const StepState& st, PassActs& p, StepResult& result) {
  const Dims& d = st.d;
  const StepOptions& options = st.options;
  // ĥ in s.h (post-norm: the readout left h[k-1] there).
  if (config->feedback_state == FeedbackState::kPreNorm) CopyTensor(*be, s.h, passes[k - 2].x[d.l]);
  if (options.jitter > 0) AddJitter(*be, s.h, s.branch, d.b, options.jitter, options, k);
  be->ShiftRightForward(p.shifted.Reshape({d.b, d.t, d.d}), s.h.Reshape({d.b, d.t, d.d}));
  std::vector<uint8_t> plain(d.n);
  for (int64_t bi = 0; bi < d.b; ++bi) {
    Rng rng = StepDrawRng(options.seed, k, options.row_offset + bi, /*kind=*/1);
    PlainMask(st.inputs.data() + bi * d.t, d.t, config->eod_id, options.prefix_mixin, rng,
              plain.data() + bi * d.t);
  }
  be->CopyFromHost(p.plain.data, plain.data(), d.n);
  result.plain.push_back(std::move(plain));
}

void Model::Impl::Forward(const StepState& st, StepResult& result) {
  const ModelConfig& cfg = *config;
  const Dims& d = st.d;
  const StepOptions& options = st.options;
  be->EmbeddingForward(s.e, embed, s.tokens);
  tp->Sum(s.e);  // each vocabulary shard gave its rows, zeros elsewhere
  if (st.k_passes >= 2) {
    be->RmsNormForward(s.ng, s.rstd_g, s.e, norm_g, kEps);
    Linear(*be, s.gate_fb, s.ng, w_g);
  }
  for (int k = 1; k <= st.k_passes; ++k) {
    PassActs& p = passes[k - 1];
    if (k >= 2) FeedbackInput(k, st, p, result);
    InputStage(k, p, p.x[0]);
    for (int64_t l = 0; l < d.l; ++l) {
      const LayerActs& a = p.layers[l];
      AttentionHalfForward(*be, cfg, d, layer_p[l], a, p.x[l], s.branch, l, /*project=*/true);
      FfnHalfForward(*be, d, layer_p[l], a, p.x[l + 1], s.branch);
    }
    be->RmsNormForward(s.h, p.rstd_f, p.x[d.l], final_norm, kEps);
    // The readout's backward is fused into its forward (ops/readout_loss.h): dh gets the
    // gradient of w_k·ℓ_k at h, dE its share.
    const double w =
        k == 1 || cfg.feedback_loss == FeedbackLoss::kSum ? 1.0 : 1.0 / (st.k_passes - 1);
    const int64_t den = st.denominator;
    const float ce_scale = den ? static_cast<float>(w / den) : 0.0f;
    const float z_scale = den ? static_cast<float>(w * cfg.z_loss / den) : 0.0f;
    ops::CombineRows combine;
    if (tp->size() > 1) {
      combine = [&](Tensor loss, Tensor lse, int64_t r0) { CombineShards(st, loss, lse, r0); };
    }
    ops::ReadoutLossSums sums = ops::ReadoutCrossEntropy(
        *be, s.h, embed, s.targets, st.shard_targets.data(), static_cast<int32_t>(cfg.ignore_id),
        {s.logits, s.row_loss, s.row_lse}, ce_scale, z_scale, options.backward ? p.dh : Tensor(),
        options.backward ? d_embed : Tensor(), combine);
    tp->SumHost(&sums.ce_sum, 1, comm::CommType::kF64);  // each shard's rows of its targets
    if (options.backward) tp->Sum(p.dh);                 // each shard's part of the gradient
    const double ce = den ? sums.ce_sum / den : 0.0;
    const double z = den ? sums.z_sum / den : 0.0;
    result.pass_ce.push_back(ce);
    result.pass_loss.push_back(ce + cfg.z_loss * z);
    result.total += w * result.pass_loss.back();
  }
}

// Note [Vocabulary-parallel readout]: each tensor-parallel rank holds V/tp rows of the tied
// embedding, so its logits chunk is (rows, V/tp) and no rank ever holds (rows, V). After the
// local forward of a chunk the ranks all-gather their per-row log-sum-exps (rows × tp floats)
// and combine them into the global one, lse = m + log Σ_r exp(lse_r - m); the rank that holds a
// row's target turns its local loss lse_r - logit into lse - logit. The chunk's backward then
// uses the global lse (softmax over the whole vocabulary), and the shards' parts of dh and of
// the CE sum are summed over the group after the readout; z-loss uses the global lse on every
// rank.
void Model::Impl::CombineShards(const StepState& st, Tensor loss, Tensor lse, int64_t r0) {
  const int64_t rows = lse.numel();
  const int n = tp->size();
  std::vector<float> local_lse(rows), local_loss(rows), all(rows * n);
  be->CopyToHost(local_lse.data(), lse.data, rows * sizeof(float));
  be->CopyToHost(local_loss.data(), loss.data, rows * sizeof(float));
  tp->Gather(local_lse.data(), all.data(), rows, comm::CommType::kF32);
  for (int64_t i = 0; i < rows; ++i) {
    double m = all[i];
    for (int r = 1; r < n; ++r) m = std::max<double>(m, all[r * rows + i]);
    double sum = 0;
    for (int r = 0; r < n; ++r) sum += std::exp(all[r * rows + i] - m);
    const auto global = static_cast<float>(m + std::log(sum));
    const int32_t t = st.shard_targets[r0 + i];
    if (t != config->ignore_id && t != ops::kOtherShard) {
      local_loss[i] += global - local_lse[i];
    }
    local_lse[i] = global;
  }
  be->CopyFromHost(lse.data, local_lse.data(), rows * sizeof(float));
  be->CopyFromHost(loss.data, local_loss.data(), rows * sizeof(float));
}

// The layers of pass k top down; s.dx holds the gradient at x[0] of the pass afterwards.
void Model::Impl::LayersBackward(int k, const StepState& st, const PassActs& p,
                                 const std::vector<Tensor>& x) {
  const ModelConfig& cfg = *config;
  const Dims& d = st.d;
  const bool full = shape.recompute == Recompute::kFull;
  const auto& grads_final = st.options.grads_final;
  for (int64_t l = d.l - 1; l >= 0; --l) {
    const LayerActs& a = p.layers[l];
    const bool top = l == d.l - 1;
    if (full) {  // Note [Recomputation]
      AttentionHalfForward(*be, cfg, d, layer_p[l], a, x[l], s.dbranch, l, /*project=*/true);
      FfnHalfForward(*be, d, layer_p[l], a, top ? x[d.l] : Tensor(), s.dbranch);
    }
    if (top) {
      be->RmsNormBackward(s.dx, d_final_norm, p.dh, x[d.l], final_norm, p.rstd_f);
      if (cfg.feedback_state == FeedbackState::kPreNorm && k < st.k_passes) {
        be->ResidualForward(s.dx, s.dxl, 1.0f);
      }
      if (k == 1 && grads_final) grads_final(final_norm_range.first, final_norm_range.second);
    }
    if (shape.recompute == Recompute::kSelective) RecomputeFfn(*be, layer_p[l], a);
    FfnHalfBackward(*be, d, layer_p[l], layer_g[l], a, s);
    if (full) {
      AttentionHalfForward(*be, cfg, d, layer_p[l], a, x[l], Tensor(), l, /*project=*/false);
    }
    AttentionHalfBackward(*be, cfg, d, layer_p[l], layer_g[l], a, x[l], s, l);
    if (k == 1 && cfg.qk_norm) {  // final now: sum the heads' parts over the group
      tp->Sum(layer_g[l].q_norm);
      tp->Sum(layer_g[l].k_norm);
    }
    if (k == 1 && grads_final) grads_final(layer_range[l].first, layer_range[l].second);
  }
}

// Pass k's input stage backward: into s.de and, for a feedback pass, s.dg_fb and the gradient
// at the previous pass's state (post-norm: its dh, pre-norm: s.dxl).
void Model::Impl::InputBackward(int k, const StepState& st, const PassActs& p) {
  const Dims& d = st.d;
  if (k == 1) {
    if (config->pass1_input_norm) {
      be->RmsNormBackward(s.du, d_norm_in, s.dx, s.e, norm_in, p.rstd_in);
      be->ResidualForward(s.de, s.du, 1.0f);
    } else {
      be->ResidualForward(s.de, s.dx, 1.0f);
    }
    return;
  }
  if (shape.recompute == Recompute::kFull) InputStage(k, p, Tensor());  // value and u again
  be->RmsNormBackward(s.du, d_norm_in, s.dx, p.u, norm_in, p.rstd_in);
  // dvalue -> dbranch, d(gate) of this pass -> dxn, de of the plain positions -> da.
  be->FeedbackMixBackward(s.dbranch, s.dxn, s.da, s.du, p.value, s.gate_fb, p.plain);
  be->ResidualForward(s.de, s.da, 1.0f);
  be->ResidualForward(s.dg_fb, s.dxn, 1.0f);
  LinearBackwardWeight(*be, d_w_u, s.dbranch, p.shifted);
  LinearBackwardInput(*be, s.du, s.dbranch, w_u, 0.0f);  // gradient at shift(ĥ)
  be->ShiftRightBackward(s.dx.Reshape({d.b, d.t, d.d}), s.du.Reshape({d.b, d.t, d.d}));
  if (config->feedback_state == FeedbackState::kPreNorm) {
    CopyTensor(*be, s.dxl, s.dx);
  } else {
    be->ResidualForward(passes[k - 2].dh, s.dx, 1.0f);
  }
}

// Pass K down to pass 1; each pass hands the gradient at its input state to the pass before
// it. From here on the forward-only scratch is dead (Note [Activation layout]).
void Model::Impl::Backward(const StepState& st) {
  const Dims& d = st.d;
  be->Zero(s.de);
  if (st.k_passes >= 2) be->Zero(s.dg_fb);
  for (int k = st.k_passes; k >= 1; --k) {
    const PassActs& p = passes[k - 1];
    std::vector<Tensor> x = p.x;
    if (shape.recompute == Recompute::kFull) {  // Note [Recomputation]
      x[0] = s.du;
      x[d.l] = s.dxn;
      InputStage(k, p, x[0]);
    }
    LayersBackward(k, st, p, x);
    InputBackward(k, st, p);
  }
  if (st.k_passes >= 2) {    // the feedback gate, shared by every feedback pass
    const Tensor ng = s.da;  // RMSNorm(e; norm_g) again: the forward's copy was forward-only
    be->RmsNormForward(ng, s.rstd_g, s.e, norm_g, kEps);
    LinearBackwardWeight(*be, d_w_g, s.dg_fb, ng);
    LinearBackwardInput(*be, s.dxn, s.dg_fb, w_g, 0.0f);
    be->RmsNormBackward(s.du, d_norm_g, s.dxn, s.e, norm_g, s.rstd_g);
    be->ResidualForward(s.de, s.du, 1.0f);
  }
  be->EmbeddingBackward(d_embed, s.de, s.tokens);
}

StatusOr<StepResult> Model::Step(const int32_t* tokens, int64_t batch, int64_t seq,
                                 const StepOptions& options) {
  if (batch != shape_.max_batch || seq != shape_.max_seq) {
    return InvalidArgumentError("batch (" + std::to_string(batch) + ", " + std::to_string(seq) +
                                ") differs from the model's shape (" +
                                std::to_string(shape_.max_batch) + ", " +
                                std::to_string(shape_.max_seq) + ")");
  }
  if (options.passes < 1 || options.passes > shape_.max_passes) {
    return InvalidArgumentError("passes " + std::to_string(options.passes) + " outside [1, " +
                                std::to_string(shape_.max_passes) + "]");
  }
  if (options.jitter < 0) return InvalidArgumentError("jitter must be >= 0");
  if (options.loss_count < 0) return InvalidArgumentError("loss_count must be >= 0");
  Impl::StepState st{
      options, MakeDims(impl_->local, batch, seq, &*impl_->tp), options.passes, 0, {}, {}, {}, {}};
  impl_->tp->ClearStatus();
  StepResult result;
  FB_RETURN_IF_ERROR(impl_->Upload(tokens, st, &result.counted));
  st.denominator = options.loss_count > 0 ? options.loss_count : result.counted;
  impl_->Forward(st, result);
  if (options.backward) impl_->Backward(st);
  backend_->Synchronize();
  FB_RETURN_IF_ERROR(impl_->tp->status());
  return result;
}

}  // namespace fullband::model
