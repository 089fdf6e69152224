#pragma once
// Helpers for the kernel tests: the backend fixture, device buffers through the Kernels interface
// (so the tests run on any backend), random data, tiny double-precision reference implementations of
// every forward op, central finite differences, and a tolerance comparison.
//
// Every suite is one source compiled once per backend (as Cabana instantiates its tests per execution
// space): the executable's TRIDENT_TEST_BACKEND ("kokkos" or "cuda", set in CMakeLists.txt) is the
// value of the KernelTest fixture, whose k is that backend's Kernels. Both backends compute in fp32,
// so the tolerances derived below for float round-off hold for either (a different reduction order
// changes which roundings happen, not their bound).
//
// How backward ops are checked: for an op out = f(in), take L(in) = sum(out * R) with a random R.
// The test evaluates dL/din by central finite differences of the DOUBLE reference forward, and
// compares the kernel's backward, called with dout = R, against it. In double, with h = 1e-4 and
// O(1) inputs, the FD error is truncation h^2/6 |f'''| ~ 1e-8 plus rounding ~1e-16 |L| / h ~ 1e-11,
// so FD is exact to far below float precision; the kernel's float backward is then allowed the
// tolerance of float round-off over the op's reductions (stated at each use). The same reference
// checks the kernel's forward values, so the reference itself cannot drift from the kernel unnoticed.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend.hpp"
#include "kernels.hpp"

#ifndef TRIDENT_TEST_BACKEND
#define TRIDENT_TEST_BACKEND "kokkos"
#endif

namespace trident::kt {

// The fixture of every kernel suite: k is the Kernels of the backend this executable tests. The CUDA
// instantiation skips, visibly, where there is no device (and in a build without CUDA).
class KernelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (backend() == "cuda") {
#if TRIDENT_HAVE_CUDA
      if (!cuda_device_available())
        GTEST_SKIP() << "no CUDA device: the CUDA instantiation of the kernel tests needs a GPU";
      k = make_cuda_kernels();
#else
      GTEST_SKIP() << "no CUDA device: this build of trident has no CUDA backend";
#endif
    } else {
      k = make_kokkos_kernels();
    }
  }
  void TearDown() override { k.reset(); }
  const std::string& backend() const { return GetParam(); }

  std::unique_ptr<Kernels> k;
};

// Instantiates Suite (a KernelTest) for this executable's backend: test names end in /kokkos or /cuda.
#define TRIDENT_INSTANTIATE_KERNEL_SUITE(Suite)                                                      \
  INSTANTIATE_TEST_SUITE_P(Backend, Suite, ::testing::Values(std::string(TRIDENT_TEST_BACKEND)),   \
                           [](const ::testing::TestParamInfo<std::string>& info) { return info.param; })

using VecF = std::vector<float>;
using VecD = std::vector<double>;

// A buffer in the backend's memory, freed on scope exit.
class Buf {
 public:
  Buf(Kernels& k, int64_t n) : k_(k), n_(n), p_(k.alloc(n)) {}
  Buf(Kernels& k, const VecF& host) : Buf(k, int64_t(host.size())) { set(host); }
  ~Buf() { k_.free(p_); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  float* get() const { return p_; }
  int64_t size() const { return n_; }
  void set(const VecF& host) {
    EXPECT_EQ(int64_t(host.size()), n_);
    k_.copy_to_device(p_, host.data(), n_);
  }
  VecF host() const {
    VecF h(n_);
    k_.fence();
    k_.copy_to_host(h.data(), p_, n_);
    return h;
  }

 private:
  Kernels& k_;
  int64_t n_;
  float* p_;
};

class IntBuf {
 public:
  IntBuf(Kernels& k, const std::vector<int32_t>& host) : k_(k), p_(k.alloc_int(int64_t(host.size()))) {
    k.copy_to_device_int(p_, host.data(), int64_t(host.size()));
  }
  ~IntBuf() { k_.free(p_); }
  IntBuf(const IntBuf&) = delete;
  IntBuf& operator=(const IntBuf&) = delete;
  int32_t* get() const { return p_; }

 private:
  Kernels& k_;
  int32_t* p_;
};

inline VecF random_vec(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  VecF v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

inline VecD to_double(const VecF& v) { return VecD(v.begin(), v.end()); }
inline VecF to_float(const VecD& v) { return VecF(v.begin(), v.end()); }

inline double dot(const VecD& a, const VecF& r) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * double(r[i]);
  return s;
}

inline double max_abs(const VecD& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

inline bool same_bits(const VecF& a, const VecF& b) {  // empty vectors: data() may be null, not for memcmp
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Attention forward and backward with qkv, dout and dqkv (starting at init) placed `offset` floats past
// the backend's allocations, which are 16-byte aligned: the CUDA kernels load aligned operands as 16-byte
// vectors and others one float at a time, and both must give the same bits. Returns out, lse and dqkv
// one after the other.
inline VecF attention_at_offset(Kernels& k, const VecF& qkv_values, const VecF& dout_values, const VecF& init,
                                int64_t B, int64_t T, int64_t NH, int64_t KVH, int64_t HD, int64_t offset) {
  auto placed = [&](Buf& buf, const VecF& host) {
    k.copy_to_device(buf.get() + offset, host.data(), int64_t(host.size()));
    return buf.get() + offset;
  };
  Buf qkv_buf(k, int64_t(qkv_values.size()) + offset), dout_buf(k, int64_t(dout_values.size()) + offset);
  Buf dqkv_buf(k, int64_t(init.size()) + offset), out(k, B * T * NH * HD), lse(k, B * NH * T);
  const float* qkv = placed(qkv_buf, qkv_values);
  const float* dout = placed(dout_buf, dout_values);
  float* dqkv = placed(dqkv_buf, init);
  k.attention_forward(out.get(), lse.get(), qkv, B, T, NH, KVH, HD);
  k.attention_backward(dqkv, dout, qkv, out.get(), lse.get(), B, T, NH, KVH, HD);
  VecF all = out.host(), l = lse.host(), d(init.size());
  k.fence();
  k.copy_to_host(d.data(), dqkv, int64_t(d.size()));
  all.insert(all.end(), l.begin(), l.end());
  all.insert(all.end(), d.begin(), d.end());
  return all;
}

// Central finite differences of L at x, one coordinate at a time.
inline VecD fd_gradient(const std::function<double(const VecD&)>& L, VecD x, double h = 1e-4) {
  VecD g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double lp = L(x);
    x[i] = x0 - h;
    const double lm = L(x);
    x[i] = x0;
    g[i] = (lp - lm) / (2.0 * h);
  }
  return g;
}

// |got_i - want_i| <= atol + rtol |want_i| for all i. The reference must not be ~0 everywhere (a test
// comparing zeros with zeros could not fail).
inline ::testing::AssertionResult close(const VecF& got, const VecD& want, double atol, double rtol) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  if (max_abs(want) < 1e-3) return ::testing::AssertionFailure() << "degenerate reference (all ~0)";
  int bad = 0;
  double worst = 0.0;
  std::string msg;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(double(got[i]) - want[i]);
    const double tol = atol + rtol * std::fabs(want[i]);
    if (!(err <= tol)) {  // also catches NaN
      if (bad < 5)
        msg += "\n  [" + std::to_string(i) + "] got " + std::to_string(got[i]) + " want " + std::to_string(want[i]);
      ++bad;
    }
    worst = std::max(worst, err);
  }
  if (bad) return ::testing::AssertionFailure() << bad << " of " << got.size() << " outside tolerance" << msg;
  return ::testing::AssertionSuccess() << "max error " << worst;
}

inline VecD scaled(const VecF& v, double s) {
  VecD r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = s * double(v[i]);
  return r;
}

// ---------------- double-precision references of the forward ops ----------------

// out[N,OC] = x[N,IC] w[OC,IC]^T + b
inline VecD ref_matmul(const VecD& x, const VecD& w, const VecD* b, int64_t N, int64_t IC, int64_t OC) {
  VecD out(N * OC);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t o = 0; o < OC; ++o) {
      double s = b ? (*b)[o] : 0.0;
      for (int64_t c = 0; c < IC; ++c) s += x[i * IC + c] * w[o * IC + c];
      out[i * OC + o] = s;
    }
  return out;
}

inline VecD ref_layernorm(const VecD& x, const VecD& w, const VecD& b, int64_t N, int64_t C, VecD* mean = nullptr,
                          VecD* rstd = nullptr) {
  VecD out(N * C);
  if (mean) mean->assign(N, 0.0);
  if (rstd) rstd->assign(N, 0.0);
  for (int64_t i = 0; i < N; ++i) {
    double m = 0.0, v = 0.0;
    for (int64_t c = 0; c < C; ++c) m += x[i * C + c];
    m /= C;
    for (int64_t c = 0; c < C; ++c) v += (x[i * C + c] - m) * (x[i * C + c] - m);
    v /= C;
    const double rs = 1.0 / std::sqrt(v + 1e-5);
    for (int64_t c = 0; c < C; ++c) out[i * C + c] = (x[i * C + c] - m) * rs * w[c] + b[c];
    if (mean) (*mean)[i] = m;
    if (rstd) (*rstd)[i] = rs;
  }
  return out;
}

inline double ref_gelu1(double x) {
  const double pi = 3.14159265358979323846;
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / pi) * (x + 0.044715 * x * x * x)));
}
inline VecD ref_gelu(const VecD& x) {
  VecD out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = ref_gelu1(x[i]);
  return out;
}

// qkv [B,T,3,NH,HD] -> out [B,T,NH,HD]; lse [B,NH,T] = log sum_{j<=t} exp(q_t.k_j / sqrt(HD)).
inline VecD ref_attention(const VecD& qkv, int64_t B, int64_t T, int64_t NH, int64_t HD, VecD* lse_out = nullptr) {
  const int64_t C = NH * HD;
  VecD out(B * T * C, 0.0), lse(B * NH * T, 0.0);
  const double scale = 1.0 / std::sqrt(double(HD));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const double* q = &qkv[(b * T + t) * 3 * C + h * HD];
        VecD s(t + 1);
        double m = -INFINITY;
        for (int64_t j = 0; j <= t; ++j) {
          const double* k = &qkv[(b * T + j) * 3 * C + C + h * HD];
          double d = 0.0;
          for (int64_t e = 0; e < HD; ++e) d += q[e] * k[e];
          s[j] = d * scale;
          m = std::max(m, s[j]);
        }
        double z = 0.0;
        for (int64_t j = 0; j <= t; ++j) z += std::exp(s[j] - m);
        lse[(b * NH + h) * T + t] = m + std::log(z);
        double* o = &out[(b * T + t) * C + h * HD];
        for (int64_t j = 0; j <= t; ++j) {
          const double* v = &qkv[(b * T + j) * 3 * C + 2 * C + h * HD];
          const double a = std::exp(s[j] - m) / z;
          for (int64_t e = 0; e < HD; ++e) o[e] += a * v[e];
        }
      }
  if (lse_out) *lse_out = lse;
  return out;
}

// The analytic gradient of sum(ref_attention(qkv) * dout) w.r.t. qkv, in double (for shapes where
// finite differences would take too long; the tests check it against finite differences first).
inline VecD ref_attention_backward(const VecD& qkv, const VecF& dout, int64_t B, int64_t T, int64_t NH, int64_t HD) {
  const int64_t C = NH * HD;
  VecD lse, dqkv(qkv.size(), 0.0);
  const VecD out = ref_attention(qkv, B, T, NH, HD, &lse);
  const double scale = 1.0 / std::sqrt(double(HD));
  auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h) { return (b * T + t) * 3 * C + part * C + h * HD; };
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t o = (b * T + t) * C + h * HD;
        double D = 0.0;
        for (int64_t e = 0; e < HD; ++e) D += double(dout[o + e]) * out[o + e];
        for (int64_t j = 0; j <= t; ++j) {
          double s = 0.0, dp = 0.0;
          for (int64_t e = 0; e < HD; ++e) {
            s += qkv[at(b, t, 0, h) + e] * qkv[at(b, j, 1, h) + e];
            dp += double(dout[o + e]) * qkv[at(b, j, 2, h) + e];
          }
          const double p = std::exp(s * scale - lse[(b * NH + h) * T + t]), ds = p * (dp - D) * scale;
          for (int64_t e = 0; e < HD; ++e) {
            dqkv[at(b, t, 0, h) + e] += ds * qkv[at(b, j, 1, h) + e];
            dqkv[at(b, j, 1, h) + e] += ds * qkv[at(b, t, 0, h) + e];
            dqkv[at(b, j, 2, h) + e] += p * double(dout[o + e]);
          }
        }
      }
  return dqkv;
}

// Cross-entropy of rows of logits [N,V] (no padding): log-sum-exp - logit[target].
inline VecD ref_xent(const VecD& logits, const std::vector<int32_t>& targets, int64_t N, int64_t V) {
  VecD loss(N);
  for (int64_t i = 0; i < N; ++i) {
    double m = -INFINITY;
    for (int64_t j = 0; j < V; ++j) m = std::max(m, logits[i * V + j]);
    double z = 0.0;
    for (int64_t j = 0; j < V; ++j) z += std::exp(logits[i * V + j] - m);
    loss[i] = std::log(z) + m - logits[i * V + targets[i]];
  }
  return loss;
}

}  // namespace trident::kt
