// The token loops of the fused decoder recurrence (rlt/models/recurrence.py) in C++.
//
// The same ATen operations, in the same order, on the same buffers as the Python token loops
// ``_forward_loop`` and ``_backward_loop`` there: only the interpreter between them is gone (and
// the autograd dispatch, which the fused path never needs). rlt/models/native.py builds this
// file on first use; tests/models/test_model_native.py holds it equal to the Python loops.
//
// Shapes and names follow recurrence.py (T positions, N batch, d width, H heads, Dh head dim,
// f FFN width, W window, c positions of a chunk [a, b)).

#include <torch/extension.h>

#include <limits>
#include <optional>
#include <vector>

namespace {

using at::Tensor;
using std::optional;
using std::vector;

struct Loop {
  int64_t n, d, h, dh, f, wm1, interval, n_layers;
  double alpha;
  bool time_major;  // the window TimeMajor and the memory HeadMajor (small Dh), else both SlotMajor
};

const double NEG_INF = -std::numeric_limits<double>::infinity();

// The out= forms, taking the destination (often a fresh view) by value.
Tensor mm_into(Tensor out, const Tensor& a, const Tensor& b) { return at::mm_out(out, a, b); }
Tensor addmm_into(Tensor out, const Tensor& x, const Tensor& a, const Tensor& b) {
  return at::addmm_out(out, x, a, b);
}
Tensor addcmul_into(Tensor out, const Tensor& x, const Tensor& a, const Tensor& b,
                    double value = 1.0) {
  return at::addcmul_out(out, x, a, b, value);
}
Tensor mul_into(Tensor out, const Tensor& a, const Tensor& b) { return at::mul_out(out, a, b); }
Tensor sum_into(Tensor out, const Tensor& x, int64_t dim) { return at::sum_out(out, x, {dim}); }

// x / rms(x) into xhat and 1/rms into inv (recurrence._normalize).
void normalize(const Tensor& x, const Tensor& eps, const Tensor& xhat, const Tensor& inv) {
  auto norm = at::linalg_vector_norm(x, 2, {-1}, true);
  addcmul_into(inv, eps, norm, norm, 1.0 / x.size(-1)).rsqrt_();
  mul_into(xhat, x, inv);
}

// recurrence._rms_backward
Tensor rms_backward(const Tensor& dh, const Tensor& weight, const Tensor& xhat, const Tensor& inv,
                    const optional<Tensor>& residual, const Tensor& out) {
  auto g = dh * weight;
  auto dot = at::linalg_vecdot(g, xhat).unsqueeze(-1);
  auto base = residual ? at::addcmul(*residual, g, inv) : g * inv;
  return addcmul_into(out, base, xhat, dot * inv, -1.0 / dh.size(-1));
}

// recurrence._rotate: multiply real pairs of x (..., Dh) in place by complex rotations.
void rotate(const Tensor& x, const Tensor& rotation) {
  auto shape = x.sizes().vec();
  shape.back() /= 2;
  shape.push_back(2);
  if (x.scalar_type() == at::kFloat || x.scalar_type() == at::kDouble) {
    at::view_as_complex(x.view(shape)).mul_(rotation);
  } else {
    auto pairs = at::view_as_complex(x.to(at::kFloat).view(shape));
    x.copy_(at::view_as_real(pairs * rotation).flatten(-2));
  }
}

// blocks.window_mask / blocks.causal_mask
optional<Tensor> window_mask(int64_t start, int64_t queries, int64_t window, const Tensor& like) {
  if (queries == 1 && start >= window - 1) return std::nullopt;
  auto opts = like.options().dtype(at::kLong);
  auto k_pos = at::arange(start - window + 1, start + queries, opts);
  auto q_pos = at::arange(start, start + queries, opts);
  auto back = q_pos.unsqueeze(1) - k_pos.unsqueeze(0);
  return (k_pos.unsqueeze(0) >= 0).logical_and(back >= 0).logical_and(back < window);
}

optional<Tensor> causal_mask(int64_t queries, int64_t keys, const Tensor& like) {
  if (queries == 1) return std::nullopt;
  auto opts = like.options().dtype(at::kLong);
  auto q_pos = at::arange(keys - queries, keys, opts);
  return at::arange(keys, opts).unsqueeze(0) <= q_pos.unsqueeze(1);
}


// ---- the window's layouts (layouts.TimeMajor / SlotMajor) ----
// Both store keys and values slot-major, (slots, N, H, Dh); SlotMajor reads them as (N, H, L, Dh).

Tensor keys(bool tm, const Tensor& buffer, int64_t start, int64_t length) {
  auto slots = buffer.narrow(0, start, length);
  return tm ? slots : slots.permute({1, 2, 0, 3});
}

void put(const Tensor& buffer, int64_t start, const Tensor& x) {
  buffer.narrow(0, start, x.size(0)).copy_(x);
}

Tensor own(const Tensor& buffer, int64_t start, int64_t c) {
  return buffer.narrow(0, start, c);
}

// ---- the memory's layouts: layouts.HeadMajor with the TimeMajor window (tm), else SlotMajor ----

// keys or values of the memory prefix 0..b-1 as (N, H, b, Dh), from (N, H, T, Dh) (tm) or
// slot-major (T, N, H, Dh)
Tensor memory_keys(bool tm, const Tensor& memory, int64_t b) {
  return tm ? memory.narrow(2, 0, b) : memory.narrow(0, 0, b).permute({1, 2, 0, 3});
}

// p2: rows a..a+c-1, b keys, of a memory-probability buffer (N, H, T, T) (tm) or query-major
// (T, N, H, T), as (N, H, c, b)
Tensor p2_rows(bool tm, const Tensor& buffer, int64_t a, int64_t c, int64_t b) {
  return tm ? buffer.narrow(2, a, c).narrow(3, 0, b)
            : buffer.narrow(0, a, c).narrow(3, 0, b).permute({1, 2, 0, 3});
}

Tensor attend(bool tm, const Tensor& q, const Tensor& k, const Tensor& v,
              const optional<Tensor>& mask, const Tensor& out) {
  if (tm) {
    auto scores = (q.unsqueeze(1) * k.unsqueeze(0)).sum(-1);  // (c, L, N, H)
    if (mask) scores.masked_fill_(mask->logical_not().unsqueeze(-1).unsqueeze(-1), NEG_INF);
    auto p = at::softmax(scores, 1);
    sum_into(out, p.unsqueeze(-1) * v.unsqueeze(0), 1);
    return p;
  }
  auto scores = at::matmul(q.permute({1, 2, 0, 3}), k.transpose(-1, -2));  // (N, H, c, L)
  if (mask) scores.masked_fill_(mask->logical_not(), NEG_INF);
  auto p = at::softmax(scores, -1);
  out.copy_(at::matmul(p, v).permute({2, 0, 1, 3}));
  return p;
}

Tensor attend_backward(bool tm, const Tensor& p, const Tensor& da, const Tensor& k,
                       const Tensor& v, const Tensor& dq) {
  if (tm) {
    auto dp = (da.unsqueeze(1) * v.unsqueeze(0)).sum(-1);  // (c, L, N, H)
    auto ds = p * (dp - (dp * p).sum(1, true));
    sum_into(dq, ds.unsqueeze(-1) * k.unsqueeze(0), 1);
    return ds;
  }
  auto dp = at::matmul(da.permute({1, 2, 0, 3}), v.transpose(-1, -2));  // (N, H, c, L)
  auto ds = p * (dp - (dp * p).sum(-1, true));
  dq.copy_(at::matmul(ds, k).permute({2, 0, 1, 3}));
  return ds;
}

void accumulate(bool tm, const Tensor& acc, const Tensor& weights, int64_t first, const Tensor& x) {
  if (tm) {  // weights (c, L, N, H), x (c, N, H, Dh)
    auto w = weights.narrow(1, first, weights.size(1) - first);
    if (w.size(0) == 1)
      acc.addcmul_(w[0].unsqueeze(-1), x[0]);
    else
      acc.add_((w.unsqueeze(-1) * x.unsqueeze(1)).sum(0));
    return;
  }
  // weights (N, H, c, L), x (c, N, H, Dh)
  auto w = weights.narrow(-1, first, weights.size(-1) - first).transpose(-1, -2);
  auto xp = x.permute({1, 2, 0, 3});
  if (w.size(-1) == 1)
    acc.addcmul_(w, xp);
  else
    acc.add_(at::matmul(w, xp));
}

Loop make_loop(const Tensor& e, int64_t n_heads, int64_t window, int64_t interval, double alpha,
               bool time_major, int64_t n_layers, int64_t f) {
  Loop s;
  s.n = e.size(1);
  s.d = e.size(2);
  s.h = n_heads;
  s.dh = s.d / n_heads;
  s.f = f;
  s.wm1 = window - 1;
  s.interval = interval;
  s.n_layers = n_layers;
  s.alpha = alpha;
  s.time_major = time_major;
  return s;
}

// ``_forward_loop``: fills the buffers; returns the SWA probabilities, [layer * C + chunk].
vector<Tensor> forward_loop(
    const vector<int64_t>& chunks,  // a, b, cut per chunk
    int64_t n_heads, int64_t window, int64_t interval, double alpha, bool time_major,
    const Tensor& eps, const Tensor& e, const Tensor& ge, const Tensor& mem_k,
    const Tensor& mem_v, const Tensor& s0, const Tensor& w_sp_folded,
    const vector<Tensor>& projections,  // 6 per layer: qkv, o, q, co, 13, 2 (folded, (in, out))
    const Tensor& tables, const Tensor& S, const Tensor& out, const Tensor& XH, const Tensor& INV,
    const Tensor& A1, const Tensor& A2, const Tensor& QC, const Tensor& Z13, const Tensor& QKV,
    const Tensor& K, const Tensor& V, const Tensor& P2, const Tensor& scratch) {
  at::AutoDispatchBelowADInplaceOrView no_autograd;
  const int64_t n_layers = static_cast<int64_t>(projections.size()) / 6;
  const int64_t n_chunks = static_cast<int64_t>(chunks.size()) / 3;
  const Loop s = make_loop(e, n_heads, window, interval, alpha, time_major, n_layers,
                           n_layers ? Z13.size(-1) / 2 : 0);
  const int64_t n = s.n, d = s.d, h = s.h, dh = s.dh, f = s.f, wm1 = s.wm1;
  vector<Tensor> p1(n_layers * n_chunks);
  Tensor state = s0;
  for (int64_t ci = 0; ci < n_chunks; ++ci) {
    const int64_t a = chunks[3 * ci], b = chunks[3 * ci + 1], c = b - a;
    S[ci].copy_(state);
    // gated merge: one (N, d) x (d, 2d) matmul per chunk, the rest elementwise
    auto norm = at::linalg_vector_norm(state, 2, {-1}, true);
    auto z = at::mm(state * at::addcmul(eps, norm, norm, 1.0 / d).rsqrt_(), w_sp_folded);
    auto gate = at::sigmoid(ge.narrow(0, a, c) + z.narrow(1, 0, d));  // (c, N, d)
    auto out_c = out.narrow(0, a, c);
    auto x_in = scratch[0].narrow(0, 0, c), x_1 = scratch[1].narrow(0, 0, c),
         x_2 = scratch[2].narrow(0, 0, c);
    Tensor x = n_layers == 0 ? out_c : x_in;  // u, the first block's input
    addcmul_into(x, e.narrow(0, a, c), gate, z.narrow(1, d, d) * s.alpha);
    auto swa_mask = window_mask(a, c, window, e);
    auto mem_mask = causal_mask(c, b, e);
    auto rot = tables.narrow(0, a, c);
    for (int64_t li = 0; li < n_layers; ++li) {
      const Tensor* p = &projections[6 * li];
      auto xh = XH[li].narrow(1, a, c), inv = INV[li].narrow(1, a, c);  // (3, c, N, d|1)
      // -- sliding-window self-attention over the layer's own keys
      auto qkv = QKV[li].narrow(0, a, c);  // (c, N, 3, H, Dh)
      normalize(x, eps, xh[0], inv[0]);
      mm_into(qkv.view({c * n, 3 * d}), xh[0].view({c * n, d}), p[0]);
      rotate(qkv.narrow(2, 0, 2), rot);
      put(K[li], a + wm1, qkv.select(2, 1));
      put(V[li], a + wm1, qkv.select(2, 2));
      auto a1 = A1[li].narrow(0, a, c).view({c, n, h, dh});
      p1[li * n_chunks + ci] =
          attend(s.time_major, qkv.select(2, 0), keys(s.time_major, K[li], a, c + wm1),
                 keys(s.time_major, V[li], a, c + wm1), swa_mask, a1);
      addmm_into(x_1.view({c * n, d}), x.view({c * n, d}), a1.view({c * n, d}), p[1]);
      // -- memory cross-attention over the prefix 0..b-1
      auto qc = QC[li].narrow(0, a, c).view({c, n, h, dh});
      normalize(x_1, eps, xh[1], inv[1]);
      mm_into(qc.view({c * n, d}), xh[1].view({c * n, d}), p[2]);
      auto a2 = A2[li].narrow(0, a, c).view({c, n, h, dh});
      auto pm = attend(false, qc, memory_keys(s.time_major, mem_k, b),
                       memory_keys(s.time_major, mem_v, b), mem_mask, a2);
      p2_rows(s.time_major, P2[li], a, c, b).copy_(pm);
      addmm_into(x_2.view({c * n, d}), x_1.view({c * n, d}), a2.view({c * n, d}), p[3]);
      // -- SwiGLU
      auto z13 = Z13[li].narrow(0, a, c).view({c * n, 2 * f});
      normalize(x_2, eps, xh[2], inv[2]);
      mm_into(z13, xh[2].view({c * n, d}), p[4]);
      auto m = at::silu(z13.narrow(1, 0, f)) * z13.narrow(1, f, f);  // (c*N, f)
      x = li == n_layers - 1 ? out_c : x_in;
      addmm_into(x.view({c * n, d}), x_2.view({c * n, d}), m, p[5]);
    }
    if (b % s.interval == 0) state = out_c[c - 1];  // a complete chunk: the next state
  }
  return p1;
}

// ``_backward_loop``: fills the gradient buffers; returns dL/ds0.
Tensor backward_loop(
    const vector<int64_t>& chunks, int64_t n_heads, int64_t window, int64_t interval,
    bool time_major,
    const vector<Tensor>& weights,  // 9 per layer, BlockWeights order (unfolded)
    const vector<Tensor>& w_q_scaled, const Tensor& w_sn, const Tensor& w_sp,
    const Tensor& mem_k, const Tensor& mem_v, const Tensor& inverse_rotations,
    const vector<Tensor>& p1, const Tensor& XH, const Tensor& INV, const Tensor& Z13,
    const Tensor& QKV, const Tensor& K, const Tensor& V, const Tensor& P2, const Tensor& s_hat,
    const Tensor& s_inv, const Tensor& k_gate, const Tensor& k_ws, const Tensor& gx,
    const Tensor& gx1, const Tensor& gx2, const Tensor& gqkv, const Tensor& gk, const Tensor& gv,
    const Tensor& gqc, const Tensor& g13, const Tensor& gh, const Tensor& ga2, const Tensor& ds2,
    const Tensor& gge, const Tensor& gz, const Tensor& gr) {
  at::AutoDispatchBelowADInplaceOrView no_autograd;
  const int64_t n_layers = static_cast<int64_t>(weights.size()) / 9;
  const int64_t n_chunks = static_cast<int64_t>(chunks.size()) / 3;
  const Loop s = make_loop(gx[0], n_heads, window, interval, 0.0, time_major, n_layers,
                           n_layers ? Z13.size(-1) / 2 : 0);
  const int64_t n = s.n, d = s.d, h = s.h, dh = s.dh, f = s.f, wm1 = s.wm1;
  const bool tm = s.time_major;
  Tensor ds0;
  for (int64_t ci = n_chunks - 1; ci >= 0; --ci) {
    const int64_t a = chunks[3 * ci], b = chunks[3 * ci + 1], cut = chunks[3 * ci + 2];
    const int64_t c = b - a;
    const int64_t lo = std::max(a, cut + wm1);  // slots before the latest cut are detached
    for (int64_t li = n_layers - 1; li >= 0; --li) {
      const Tensor* w = &weights[9 * li];
      const Tensor &w_an = w[0], &w_qkv = w[1], &w_o = w[2], &w_cn = w[3], &w_co = w[5],
                   &w_fn = w[6], &w_13 = w[7], &w_2 = w[8];
      auto xh = XH[li].narrow(1, a, c), inv = INV[li].narrow(1, a, c);
      auto ghc = gh[li].narrow(1, a, c);  // (3, c, N, d)
      auto g_out = gx[li + 1].narrow(0, a, c), g_2 = gx2[li].narrow(0, a, c),
           g_1 = gx1[li].narrow(0, a, c);  // (c, N, d)
      // -- SwiGLU
      auto dm = at::mm(g_out.view({c * n, d}), w_2);  // (c*N, f)
      auto pre = Z13[li].narrow(0, a, c).view({c * n, 2 * f});
      auto grad = g13[li].narrow(0, a, c).view({c * n, 2 * f});
      auto pre1 = pre.narrow(1, 0, f), pre3 = pre.narrow(1, f, f);
      at::Tensor g1 = grad.narrow(1, 0, f);
      at::silu_backward_out(g1, dm * pre3, pre1);
      mul_into(grad.narrow(1, f, f), dm, at::silu(pre1));
      auto dh2 = mm_into(ghc[2].view({c * n, d}), grad, w_13).view({c, n, d});
      rms_backward(dh2, w_fn, xh[2], inv[2], g_out, g_2);
      // -- memory cross-attention
      auto da2 = ga2[li].narrow(0, a, c).view({c, n, h, dh});
      mm_into(da2.view({c * n, d}), g_2.view({c * n, d}), w_co);
      auto p2 = p2_rows(tm, P2[li], a, c, b);
      auto gq = gqc[li].narrow(0, a, c).view({c, n, h, dh});
      auto dsc2 =
          attend_backward(false, p2, da2, memory_keys(tm, mem_k, b), memory_keys(tm, mem_v, b), gq);
      p2_rows(tm, ds2[li], a, c, b).copy_(dsc2);
      auto dh1 = mm_into(ghc[1].view({c * n, d}), gq.view({c * n, d}), w_q_scaled[li]);
      rms_backward(dh1.view({c, n, d}), w_cn, xh[1], inv[1], g_2, g_1);
      // -- sliding-window self-attention
      auto da1 = at::mm(g_1.view({c * n, d}), w_o).view({c, n, h, dh});
      auto g_own = gqkv[li].narrow(0, a, c);  // (c, N, 3, H, Dh)
      const auto& p = p1[li * n_chunks + ci];
      auto dsc1 = attend_backward(tm, p, da1, keys(tm, K[li], a, c + wm1),
                                  keys(tm, V[li], a, c + wm1), g_own.select(2, 0));
      auto q = QKV[li].narrow(0, a, c).select(2, 0);
      accumulate(tm, keys(tm, gk[li], lo, b + wm1 - lo), dsc1, lo - a, q);
      accumulate(tm, keys(tm, gv[li], lo, b + wm1 - lo), p, lo - a, da1);
      g_own.select(2, 1).copy_(own(gk[li], a + wm1, c));  // complete: later windows done
      g_own.select(2, 2).copy_(own(gv[li], a + wm1, c));
      rotate(g_own.narrow(2, 0, 2), inverse_rotations.narrow(0, a, c));
      auto dh0 = mm_into(ghc[0].view({c * n, d}), g_own.view({c * n, 3 * d}), w_qkv);
      rms_backward(dh0.view({c, n, d}), w_an, xh[0], inv[0], g_1, gx[li].narrow(0, a, c));
    }
    // -- gated merge: dL/du = gx[0, a:b] (which is also dL/de)
    auto du = gx[0].narrow(0, a, c);
    auto gge_c = gge.narrow(0, a, c);
    mul_into(gge_c, du, k_gate.narrow(0, a, c));
    sum_into(gz[ci].narrow(1, 0, d), gge_c, 0);
    sum_into(gz[ci].narrow(1, d, d), du * k_ws.narrow(0, a, c), 0);
    mm_into(gr[ci], gz[ci], w_sp);
    auto ds = rms_backward(gr[ci], w_sn, s_hat[ci], s_inv[ci], std::nullopt,
                           at::empty_like(gr[ci]));
    if (a == 0)
      ds0 = ds;
    else if (cut != a)  // the state entering a chunk after a cut is detached
      gx[n_layers][a - 1].add_(ds);
  }
  return ds0;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward_loop", &forward_loop, "the fused recurrence's forward token loop");
  m.def("backward_loop", &backward_loop, "the fused recurrence's backward token loop");
}
